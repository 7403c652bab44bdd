// Softmax over each row of an fp32 [M, N] matrix. One thread per row; the running values are declared
// before the row index, the body sits inside `if (row < M)`, and each pass indexes through a local
// `loc`. Three passes: the row maximum, the sum of exponentials, the output.
#include <cuda_runtime.h>
#include <math.h>

__global__ void softmax_naive(const float* matrix, float* result, int M, int N) {
    float x_max = -INFINITY;
    float norm_val = 0;
    int row = blockDim.x * blockIdx.x + threadIdx.x;
    if (row < M) {
        for (int i = 0; i < N; i++) {
            int loc = row * N + i;
            x_max = max(x_max, matrix[loc]);
        }
        for (int i = 0; i < N; i++) {
            int loc = row * N + i;
            norm_val += exp(matrix[loc] - x_max);
        }
        for (int i = 0; i < N; i++) {
            int loc = row * N + i;
            result[loc] = exp(matrix[loc] - x_max) / norm_val;
        }
    }
}

extern "C" cudaError_t softmax_forward(const float* matrix, float* result, int M, int N, cudaStream_t stream) {
    dim3 threads(1024);
    dim3 blocks((M + 1023) / 1024);
    softmax_naive<<<blocks, threads, 0, stream>>>(matrix, result, M, N);
    return cudaGetLastError();
}
