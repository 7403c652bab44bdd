// WMMA half-precision GEMM: each block stages 64x32 tiles of A and B through registers into padded
// shared arrays (row pitch BK + 8 halves), and each warp keeps a 2x2 array of 16x16 accumulator
// fragments. Uses the wmma API with `using namespace nvcuda`.
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;

#define BM 64
#define BN 64
#define BK 32
#define SKEW 8

__global__ void hgemm_wmma(const half* A, const half* B, float* C, int M, int N, int K)
{
    __shared__ half As[BM][BK + SKEW];
    __shared__ half Bs[BK][BN + SKEW];
    const int warp_id = threadIdx.x / 32;          // 4 warps: 2 x 2, each 32x32 of C
    const int wy = warp_id / 2, wx = warp_id % 2;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
            wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int e = threadIdx.x; e < BM * BK; e += blockDim.x) {
            int r = e / BK, c = e % BK;
            As[r][c] = A[(blockIdx.y * BM + r) * K + k0 + c];
        }
        for (int e = threadIdx.x; e < BK * BN; e += blockDim.x) {
            int r = e / BN, c = e % BN;
            Bs[r][c] = B[(k0 + r) * N + blockIdx.x * BN + c];
        }
        __syncthreads();
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b[2];
            for (int i = 0; i < 2; ++i) load_matrix_sync(a[i], &As[wy * 32 + i * 16][kk], BK + SKEW);
            for (int j = 0; j < 2; ++j) load_matrix_sync(b[j], &Bs[kk][wx * 32 + j * 16], BN + SKEW);
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j)
                    mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
            store_matrix_sync(C + (blockIdx.y * BM + wy * 32 + i * 16) * N + blockIdx.x * BN + wx * 32 + j * 16,
                              acc[i][j], N, wmma::mem_row_major);
}
