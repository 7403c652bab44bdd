// Softmax over each row of an fp32 [rows, cols] matrix (cols a size_t). One thread per row through row
// pointers: the maximum starts from the row's first element and compares the rest one by one; the
// exponentials go to the output, which a last pass divides in place by their sum.
#include <cuda_runtime.h>
#include <cstddef>

#ifndef SOFTMAX_ROWS_ROW_THREADS
#define SOFTMAX_ROWS_ROW_THREADS 256  // threads per block: a block per row
#endif
static_assert(SOFTMAX_ROWS_ROW_THREADS >= 32 && SOFTMAX_ROWS_ROW_THREADS <= 1024 && (SOFTMAX_ROWS_ROW_THREADS & (SOFTMAX_ROWS_ROW_THREADS - 1)) == 0, "SOFTMAX_ROWS_ROW_THREADS (threads per block) must be a power of two from 32 to 1024");
__device__ __forceinline__ float kl_row_max(float v) {
    // each warp combines in registers (a butterfly of shuffles), then the warps' partials through
    // shared memory; every thread gets the result
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __shared__ float kl_part[32];
    if ((threadIdx.x & 31u) == 0) kl_part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = kl_part[0];
    for (unsigned w = 1; w < blockDim.x / 32; ++w) v = fmaxf(v, kl_part[w]);
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

__global__ void softmax_kernel(const float* input, float* output, int rows, size_t cols) {
    int r = blockIdx.x;
    if (r >= rows) return;
    const int kl_t = threadIdx.x, kl_n = blockDim.x;  // the thread, and the threads sharing a row
    const float* in = input + r * cols;
    float* out = output + r * cols;
    float max_val = in[0];
    for (size_t j = kl_t + 1; j < cols; j += kl_n) {
        if (in[j] > max_val) max_val = in[j];
    }
    max_val = kl_row_max(max_val);
    float denom = 0.0f;
    for (size_t j = kl_t; j < cols; j += kl_n) {
        out[j] = expf(in[j] - max_val);
        denom += out[j];
    }
    denom = kl_row_sum(denom);
    for (size_t j = kl_t; j < cols; j += kl_n) {
        out[j] /= denom;
    }
}

extern "C" cudaError_t softmax_rows(const float* input, float* output, int rows, long long cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    int threads = SOFTMAX_ROWS_ROW_THREADS;
    softmax_kernel<<<rows, threads, 0, stream>>>(input, output, rows, (size_t)cols);
    return cudaGetLastError();
}
