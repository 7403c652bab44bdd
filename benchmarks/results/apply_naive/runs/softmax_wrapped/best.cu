// Softmax over each row of an fp32 [M, N] matrix. One thread per row; the running values are declared
// before the row index, the body sits inside `if (row < M)`, and each pass indexes through a local
// `loc`. Three passes: the row maximum, the sum of exponentials, the output.
#include <cuda_runtime.h>
#include <math.h>

#ifndef SOFTMAX_FORWARD_ROW_THREADS
#define SOFTMAX_FORWARD_ROW_THREADS 256  // threads per block: a block per row
#endif
static_assert(SOFTMAX_FORWARD_ROW_THREADS >= 32 && SOFTMAX_FORWARD_ROW_THREADS <= 1024 && (SOFTMAX_FORWARD_ROW_THREADS & (SOFTMAX_FORWARD_ROW_THREADS - 1)) == 0, "SOFTMAX_FORWARD_ROW_THREADS (threads per block) must be a power of two from 32 to 1024");
__device__ __forceinline__ float kl_row_max(float v) {
    // each warp combines in registers (a butterfly of shuffles), then the warps' partials through
    // shared memory; every thread gets the result
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    __shared__ float kl_part[32];
    if ((threadIdx.x & 31u) == 0) kl_part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = kl_part[0];
    for (unsigned w = 1; w < blockDim.x / 32; ++w) v = max(v, kl_part[w]);
    __syncthreads();
    return v;
}

__device__ __forceinline__ float kl_row_sum(float v) {
    // each warp combines in registers (a butterfly of shuffles), then the warps' partials through
    // shared memory; every thread gets the result
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __shared__ float kl_part[32];
    if ((threadIdx.x & 31u) == 0) kl_part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = kl_part[0];
    for (unsigned w = 1; w < blockDim.x / 32; ++w) v = v + kl_part[w];
    __syncthreads();
    return v;
}

__global__ void softmax_naive(const float* matrix, float* result, int M, int N) {
    float x_max = -INFINITY;
    float norm_val = 0;
    int row = blockIdx.x;
    if (row < M) {
        const int kl_t = threadIdx.x, kl_n = blockDim.x;  // the thread, and the threads sharing a row
        for (int i = kl_t; i < N; i += kl_n) {
            int loc = row * N + i;
            x_max = max(x_max, matrix[loc]);
        }
        x_max = kl_row_max(x_max);
        for (int i = kl_t; i < N; i += kl_n) {
            int loc = row * N + i;
            norm_val += exp(matrix[loc] - x_max);
        }
        norm_val = kl_row_sum(norm_val);
        for (int i = kl_t; i < N; i += kl_n) {
            int loc = row * N + i;
            result[loc] = exp(matrix[loc] - x_max) / norm_val;
        }
    }
}

extern "C" cudaError_t softmax_forward(const float* matrix, float* result, int M, int N, cudaStream_t stream) {
    dim3 threads(SOFTMAX_FORWARD_ROW_THREADS);
    dim3 blocks(M);
    softmax_naive<<<blocks, threads, 0, stream>>>(matrix, result, M, N);
    return cudaGetLastError();
}
