// klineage-step: mechanism=restrict
// x and out are marked __restrict__: the compiler may assume stores to out never alias x, so it may
// reorder loads past stores and read x through the read-only (non-coherent) path.
// bf16 values move as raw 16-bit patterns: a transpose does no arithmetic, so the copy is exact.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

__global__ void transpose_naive_kernel(const unsigned short* __restrict__ x, unsigned short* __restrict__ out, int rows,
                                       int cols) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)rows * cols) return;
    int64_t r = i / cols, c = i % cols;
    out[c * rows + r] = x[i];
}

extern "C" cudaError_t transpose_bf16(const __nv_bfloat16* x, __nv_bfloat16* out, int rows, int cols, cudaStream_t stream) {
    int64_t n = (int64_t)rows * cols;
    if (n <= 0) return cudaSuccess;
    const unsigned short* xs = reinterpret_cast<const unsigned short*>(x);
    unsigned short* os = reinterpret_cast<unsigned short*>(out);
    int block = 256;
    unsigned grid = (unsigned)((n + block - 1) / block);
    transpose_naive_kernel<<<grid, block, 0, stream>>>(xs, os, rows, cols);
    return cudaGetLastError();
}
