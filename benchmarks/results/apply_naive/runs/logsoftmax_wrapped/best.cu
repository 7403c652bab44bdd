// Log-softmax over each row of an fp32 [num_rows, num_cols] matrix. One thread per row; the body sits
// inside its bounds check, with row pointers from a size_t offset.
#include <cuda_runtime.h>
#include <math.h>

#ifndef LOG_SOFTMAX_ROW_THREADS
#define LOG_SOFTMAX_ROW_THREADS 256  // threads per block: a block per row
#endif
static_assert(LOG_SOFTMAX_ROW_THREADS >= 32 && LOG_SOFTMAX_ROW_THREADS <= 1024 && (LOG_SOFTMAX_ROW_THREADS & (LOG_SOFTMAX_ROW_THREADS - 1)) == 0, "LOG_SOFTMAX_ROW_THREADS (threads per block) must be a power of two from 32 to 1024");
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

__global__ void log_softmax_kernel(const float* input, float* output, int num_rows, int num_cols) {
    int row = blockIdx.x;
    if (row < num_rows) {
        const int kl_t = threadIdx.x, kl_n = blockDim.x;  // the thread, and the threads sharing a row
        const float* x = input + (size_t)row * num_cols;
        float* y = output + (size_t)row * num_cols;
        float mx = -INFINITY;
        const int kl_nv = (reinterpret_cast<unsigned long long>(x) % 16 == 0) ? num_cols / 4 : 0;  // 4-element units of the row (0: a misaligned row, element by element)
        for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
            const float4 kl_ld0 = *reinterpret_cast<const float4*>(x + (long long)kl_u * 4);
            for (int kl_l = 0; kl_l < 4; ++kl_l) {
                mx = fmaxf(mx, reinterpret_cast<const float*>(&kl_ld0)[kl_l]);
            }
        }
        for (int c = kl_nv * 4 + kl_t; c < num_cols; c += kl_n) mx = fmaxf(mx, x[c]);
        mx = kl_row_max(mx);
        float sum = 0.0f;
        for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
            const float4 kl_ld0 = *reinterpret_cast<const float4*>(x + (long long)kl_u * 4);
            for (int kl_l = 0; kl_l < 4; ++kl_l) {
                sum += expf(reinterpret_cast<const float*>(&kl_ld0)[kl_l] - mx);
            }
        }
        for (int c = kl_nv * 4 + kl_t; c < num_cols; c += kl_n) sum += expf(x[c] - mx);
        sum = kl_row_sum(sum);
        float lse = mx + logf(sum);
        for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
            const float4 kl_ld0 = *reinterpret_cast<const float4*>(x + (long long)kl_u * 4);
            for (int kl_l = 0; kl_l < 4; ++kl_l) {
                const int c = kl_u * 4 + kl_l;
                y[c] = reinterpret_cast<const float*>(&kl_ld0)[kl_l] - lse;
            }
        }
        for (int c = kl_nv * 4 + kl_t; c < num_cols; c += kl_n) y[c] = x[c] - lse;
    }
}

extern "C" cudaError_t log_softmax(const float* input, float* output, int num_rows, int num_cols, cudaStream_t stream) {
    int block = LOG_SOFTMAX_ROW_THREADS;
    int grid = num_rows;
    log_softmax_kernel<<<grid, block, 0, stream>>>(input, output, num_rows, num_cols);
    return cudaGetLastError();
}
