// c = a @ b with a (M, K), b (K, N), c (M, N): fp32, row-major, sizes passed as M, K, N. Thread (i, j)
// computes c[i][j] under a bounds check.
#include <cuda_runtime.h>
#include <cstddef>

__global__ void matmul_ijk(const float* a, const float* b, float* c, int M, int K, int N) {
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) {
        if (j < N) {
            float s = 0.0f;
            for (int k = 0; k < K; k++) {
                s += a[(size_t)i * K + k] * b[(size_t)k * N + j];
            }
            c[(size_t)i * N + j] = s;
        }
    }
}

extern "C" cudaError_t matmul_forward(const float* a, const float* b, float* c, int M, int K, int N,
                                      cudaStream_t stream) {
    const dim3 block(16, 16);
    const dim3 grid((N + 15) / 16, (M + 15) / 16);
    matmul_ijk<<<grid, block, 0, stream>>>(a, b, c, M, K, N);
    return cudaGetLastError();
}
