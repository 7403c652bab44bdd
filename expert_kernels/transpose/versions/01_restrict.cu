// klineage-step: mechanism=restrict
// x and out are marked __restrict__: the compiler may assume stores to out never alias x, so it may
// reorder loads past stores and read x through the read-only (non-coherent) path.
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void transpose_naive_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)rows * cols) return;
    int64_t r = i / cols, c = i % cols;
    out[c * rows + r] = x[i];
}

extern "C" cudaError_t transpose(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    int64_t n = (int64_t)rows * cols;
    if (n <= 0) return cudaSuccess;
    int block = 256;
    unsigned grid = (unsigned)((n + block - 1) / block);
    transpose_naive_kernel<<<grid, block, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
