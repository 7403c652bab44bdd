// C = A @ B for square n x n fp32 matrices, row-major. One thread per element of C; the body sits
// inside the bounds check.
#include <cuda_runtime.h>

__global__ void matmul_kernel(const float* A, const float* B, float* C, int N) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < N && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < N; ++k) {
            sum += A[row * N + k] * B[k * N + col];
        }
        C[row * N + col] = sum;
    }
}

extern "C" cudaError_t matmul_square(const float* A, const float* B, float* C, int N, cudaStream_t stream) {
    dim3 threads(16, 16);
    dim3 grid((N + 15) / 16, (N + 15) / 16);
    matmul_kernel<<<grid, threads, 0, stream>>>(A, B, C, N);
    return cudaGetLastError();
}
