// klineage-step: mechanism=restrict
// x and out are marked __restrict__: the compiler may assume the stores to out never alias x, so it
// need not reload x after each store and may read x through the read-only (non-coherent) path.
#include <cuda_runtime.h>

__global__ void cumsum_naive_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* row = x + (long long)r * cols;
    float* orow = out + (long long)r * cols;
    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) {
        sum += row[c];
        orow[c] = sum;
    }
}

extern "C" cudaError_t cumsum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    int block = 256;
    int grid = (rows + block - 1) / block;
    cumsum_naive_kernel<<<grid, block, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
