// klineage-step: mechanism=cache_hint
// Loads go through __ldg, the read-only (non-coherent) data path, explicitly instead of relying on
// the compiler to prove it safe; ROW_SUM_LOAD_MODE=1 selects the evict-first __ldcs hint instead.
#include <cuda_runtime.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef ROW_SUM_LOAD_MODE
#define ROW_SUM_LOAD_MODE 0          // 0: __ldg (read-only path); 1: __ldcs (evict-first)
#endif

__device__ __forceinline__ float rs_load1(const float* p) {
#if ROW_SUM_LOAD_MODE == 1
    return __ldcs(p);
#else
    return __ldg(p);
#endif
}
#define RS_LOAD1(p) rs_load1(p)

__global__ void row_sum_naive_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) sum += RS_LOAD1(x + (long long)r * cols + c);
    out[r] = sum;
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    int block = 256;
    int grid = (rows + block - 1) / block;
    row_sum_naive_kernel<<<grid, block, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
