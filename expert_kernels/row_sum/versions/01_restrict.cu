// klineage-step: mechanism=restrict
// x and out are marked __restrict__: the compiler may assume the store to out never aliases x, so
// it can keep row loads in registers and reorder them freely (and use the read-only path).
#include <cuda_runtime.h>

__global__ void row_sum_naive_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) sum += x[(long long)r * cols + c];
    out[r] = sum;
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    int block = 256;
    int grid = (rows + block - 1) / block;
    row_sum_naive_kernel<<<grid, block, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
