// Log-softmax over each row of an fp16 [n_rows, n_cols] matrix, fp32 math. One thread per row; the
// check reads `n_rows <= r`, the row pointers come from a 64-bit offset.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#ifndef LSM_BLOCK
#define LSM_BLOCK 256
#endif

__global__ void log_softmax_f16(const __half* __restrict__ x, __half* __restrict__ y, int n_rows, int n_cols) {
    const int r = threadIdx.x + blockIdx.x * blockDim.x;
    if (n_rows <= r) return;
    const __half* src = x + (long long)r * n_cols;
    __half* dst = y + (long long)r * n_cols;
    float hi = -INFINITY;
    for (int k = 0; k < n_cols; ++k) hi = fmaxf(hi, __half2float(src[k]));
    float acc = 0.0f;
    for (int k = 0; k < n_cols; ++k) acc += expf(__half2float(src[k]) - hi);
    const float shift = hi + logf(acc);
    for (int k = 0; k < n_cols; ++k) dst[k] = __float2half(__half2float(src[k]) - shift);
}

extern "C" cudaError_t log_softmax_half(const __half* x, __half* y, int n_rows, int n_cols, cudaStream_t stream) {
    if (n_rows <= 0) return cudaSuccess;
    log_softmax_f16<<<(n_rows + LSM_BLOCK - 1) / LSM_BLOCK, LSM_BLOCK, 0, stream>>>(x, y, n_rows, n_cols);
    return cudaGetLastError();
}
