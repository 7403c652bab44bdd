// out[b] = x[b] @ y[b] for nb problems (x: nb x M x K, y: nb x K x N, out: nb x M x N, fp32). Each thread
// owns one (row, col) and loops over the problems itself, moving its pointers to each one.
#include <cuda_runtime.h>

__global__ void bmm_naive(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, int nb,
                          int M, int N, int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        for (int b = 0; b < nb; ++b) {
            const float* xb = x + (size_t)b * M * K;
            const float* yb = y + (size_t)b * K * N;
            float acc = 0.0f;
            for (int k = 0; k < K; ++k) acc += xb[row * K + k] * yb[k * N + col];
            out[(size_t)b * M * N + row * N + col] = acc;
        }
    }
}

extern "C" cudaError_t bmm(const float* x, const float* y, float* out, int nb, int M, int N, int K,
                           cudaStream_t stream) {
    dim3 block(32, 4);
    dim3 grid((N + 31) / 32, (M + 3) / 4);
    bmm_naive<<<grid, block, 0, stream>>>(x, y, out, nb, M, N, K);
    return cudaGetLastError();
}
