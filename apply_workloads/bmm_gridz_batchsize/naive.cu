// Batched matrix multiplication C[b] = A[b] @ B[b] for batch_size dense problems (A: batch_size x m x k,
// B: batch_size x k x n, C: batch_size x m x n, fp32). One thread per element of C; the grid's z index
// is the problem.
#include <cuda_runtime.h>

__global__ void batched_matmul_kernel(const float* A, const float* B, float* C, int batch_size, int m, int k,
                                      int n) {
    int batch = blockIdx.z;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m || col >= n) return;
    float sum = 0.0f;
    for (int e = 0; e < k; e++) {
        sum += A[batch * m * k + row * k + e] * B[batch * k * n + e * n + col];
    }
    C[batch * m * n + row * n + col] = sum;
}

extern "C" cudaError_t batched_matmul(const float* A, const float* B, float* C, int batch_size, int m, int k, int n,
                                      cudaStream_t stream) {
    dim3 block(16, 16);
    dim3 grid((n + block.x - 1) / block.x, (m + block.y - 1) / block.y, batch_size);
    batched_matmul_kernel<<<grid, block, 0, stream>>>(A, B, C, batch_size, m, k, n);
    return cudaGetLastError();
}
