// Attention scores S = Q K^T for one head in fp16: 32x32 output tiles, Q and K tiles staged in shared
// memory with an 8-half skew on the row pitch, each thread producing a 2x2 block of scores.
#include <cuda_fp16.h>

constexpr int T = 32;
constexpr int SKEW_HALVES = 8;

__global__ void qk_scores(const half* __restrict__ Q, const half* __restrict__ K, float* __restrict__ S,
                          int seq, int d, float scale)
{
    __shared__ half qs[T][T + SKEW_HALVES];
    __shared__ half ks[T][T + SKEW_HALVES];
    const int tx = threadIdx.x, ty = threadIdx.y;     // 16 x 16
    const int q0 = blockIdx.y * T, k0 = blockIdx.x * T;
    float c[2][2] = {};
    for (int d0 = 0; d0 < d; d0 += T) {
        for (int r = ty; r < T; r += 16)
            for (int cc = tx; cc < T; cc += 16) {
                qs[r][cc] = Q[(size_t)(q0 + r) * d + d0 + cc];
                ks[r][cc] = K[(size_t)(k0 + r) * d + d0 + cc];
            }
        __syncthreads();
        for (int kk = 0; kk < T; ++kk)
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j)
                    c[i][j] += __half2float(qs[ty * 2 + i][kk]) * __half2float(ks[tx * 2 + j][kk]);
        __syncthreads();
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
            S[(size_t)(q0 + ty * 2 + i) * seq + k0 + tx * 2 + j] = c[i][j] * scale;
}
