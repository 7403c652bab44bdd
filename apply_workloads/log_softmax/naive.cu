// log_softmax naive: out[r, c] = x[r, c] - m - log(sum_j exp(x[r, j] - m)) with m the row's maximum,
// bf16 in and out, fp32 math. One thread per row walks its row three times, serially with scalar
// loads: a pass for the maximum, a pass summing the shifted exponentials, a pass writing the output.
// No cooperation between threads, no vector access, no register cache: the plainest stable form.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef LOG_SOFTMAX_BLOCK
#define LOG_SOFTMAX_BLOCK 128   // threads (rows) per block
#endif

__global__ void log_softmax_naive_kernel(const __nv_bfloat16* x, __nv_bfloat16* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float m = -INFINITY;
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) m = fmaxf(m, __bfloat162float(x[(long long)r * cols + c]));
    for (int c = 0; c < cols; ++c) s += expf(__bfloat162float(x[(long long)r * cols + c]) - m);
    float norm = m + logf(s);
    for (int c = 0; c < cols; ++c)
        out[(long long)r * cols + c] = __float2bfloat16(__bfloat162float(x[(long long)r * cols + c]) - norm);
}

extern "C" cudaError_t log_softmax(const __nv_bfloat16* x, __nv_bfloat16* out, int rows, int cols,
                                   cudaStream_t stream) {
    if (rows <= 0) return cudaSuccess;
    int grid = (rows + LOG_SOFTMAX_BLOCK - 1) / LOG_SOFTMAX_BLOCK;
    log_softmax_naive_kernel<<<grid, LOG_SOFTMAX_BLOCK, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
