// Log-softmax over each row of an fp16 [n_rows, n_cols] matrix, fp32 math. One thread per row; the
// check reads `n_rows <= r`, the row pointers come from a 64-bit offset.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#ifndef LSM_BLOCK
#define LSM_BLOCK 128  // threads per block: a block per row
#endif
static_assert(LSM_BLOCK >= 32 && LSM_BLOCK <= 1024 && (LSM_BLOCK & (LSM_BLOCK - 1)) == 0, "LSM_BLOCK (threads per block) must be a power of two from 32 to 1024");

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

__global__ void log_softmax_f16(const __half* __restrict__ x, __half* __restrict__ y, int n_rows, int n_cols) {
    const int r = blockIdx.x;
    if (n_rows <= r) return;
    const int kl_t = threadIdx.x, kl_n = blockDim.x;  // the thread, and the threads sharing a row
    const __half* src = x + (long long)r * n_cols;
    __half* dst = y + (long long)r * n_cols;
    float hi = -INFINITY;
    const int kl_nv = (reinterpret_cast<unsigned long long>(dst) % 16 == 0) ? n_cols / 8 : 0;  // 8-element units of the row (0: a misaligned row, element by element)
    for (int k = kl_t; k < n_cols; k += kl_n) hi = fmaxf(hi, __half2float(src[k]));
    hi = kl_row_max(hi);
    float acc = 0.0f;
    for (int k = kl_t; k < n_cols; k += kl_n) acc += expf(__half2float(src[k]) - hi);
    acc = kl_row_sum(acc);
    const float shift = hi + logf(acc);
    for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
        uint4 kl_st0;
        for (int kl_l = 0; kl_l < 8; ++kl_l) {
            const int k = kl_u * 8 + kl_l;
            reinterpret_cast<__half*>(&kl_st0)[kl_l] = __float2half(__half2float(src[k]) - shift);
        }
        *reinterpret_cast<uint4*>(dst + (long long)kl_u * 8) = kl_st0;
    }
    for (int k = kl_nv * 8 + kl_t; k < n_cols; k += kl_n) dst[k] = __float2half(__half2float(src[k]) - shift);
}

extern "C" cudaError_t log_softmax_half(const __half* x, __half* y, int n_rows, int n_cols, cudaStream_t stream) {
    if (n_rows <= 0) return cudaSuccess;
    log_softmax_f16<<<n_rows, LSM_BLOCK, 0, stream>>>(x, y, n_rows, n_cols);
    return cudaGetLastError();
}
