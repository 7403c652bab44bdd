// log_softmax naive: out[r, c] = x[r, c] - m - log(sum_j exp(x[r, j] - m)) with m the row's maximum,
// bf16 in and out, fp32 math. One thread per row walks its row three times, serially with scalar
// loads: a pass for the maximum, a pass summing the shifted exponentials, a pass writing the output.
// No cooperation between threads, no vector access, no register cache: the plainest stable form.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef LOG_SOFTMAX_BLOCK
#define LOG_SOFTMAX_BLOCK 256  // threads per block: a block per row
#endif
static_assert(LOG_SOFTMAX_BLOCK >= 32 && LOG_SOFTMAX_BLOCK <= 1024 && (LOG_SOFTMAX_BLOCK & (LOG_SOFTMAX_BLOCK - 1)) == 0, "LOG_SOFTMAX_BLOCK (threads per block) must be a power of two from 32 to 1024");

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

__global__ void log_softmax_naive_kernel(const __nv_bfloat16* x, __nv_bfloat16* out, int rows, int cols) {
    int r = blockIdx.x;
    if (r >= rows) return;
    const int kl_t = threadIdx.x, kl_n = blockDim.x;  // the thread, and the threads sharing a row
    float m = -INFINITY;
    float s = 0.0f;
    const int kl_nv = (reinterpret_cast<unsigned long long>(out + (long long)r * cols) % 16 == 0) ? cols / 8 : 0;  // 8-element units of the row (0: a misaligned row, element by element)
    for (int c = kl_t; c < cols; c += kl_n) m = fmaxf(m, __bfloat162float(x[(long long)r * cols + c]));
    m = kl_row_max(m);
    for (int c = kl_t; c < cols; c += kl_n) s += expf(__bfloat162float(x[(long long)r * cols + c]) - m);
    s = kl_row_sum(s);
    float norm = m + logf(s);
    for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
        uint4 kl_st0;
        for (int kl_l = 0; kl_l < 8; ++kl_l) {
            const int c = kl_u * 8 + kl_l;
            reinterpret_cast<__nv_bfloat16*>(&kl_st0)[kl_l] = __float2bfloat16(__bfloat162float(x[(long long)r * cols + c]) - norm);
        }
        *reinterpret_cast<uint4*>(out + (long long)r * cols + (long long)kl_u * 8) = kl_st0;
    }
    for (int c = kl_nv * 8 + kl_t; c < cols; c += kl_n)
        out[(long long)r * cols + c] = __float2bfloat16(__bfloat162float(x[(long long)r * cols + c]) - norm);
}

extern "C" cudaError_t log_softmax(const __nv_bfloat16* x, __nv_bfloat16* out, int rows, int cols,
                                   cudaStream_t stream) {
    if (rows <= 0) return cudaSuccess;
    int grid = rows;
    log_softmax_naive_kernel<<<grid, LOG_SOFTMAX_BLOCK, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
