// Naive start kernel of the held-out Softmax instances:
//   out[r, c] = exp(x[r, c] - max_r) / sum_c exp(x[r, c] - max_r), bf16 in and out, fp32 math.
// One thread per row, three serial passes over the row with scalar loads (the maximum, the sum of the
// exponentials, then the output), precise expf. No vectorization, no cooperation between threads. Each
// element is read before its output is written, so out may alias x.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#ifndef SOFTMAX_BLOCK
#define SOFTMAX_BLOCK 256  // threads per block, one row each
#endif

__global__ void softmax_naive_kernel(const __nv_bfloat16* x, __nv_bfloat16* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const __nv_bfloat16* xr = x + (long long)r * cols;
    __nv_bfloat16* orow = out + (long long)r * cols;
    float row_max = -INFINITY;
    for (int c = 0; c < cols; ++c) row_max = fmaxf(row_max, __bfloat162float(xr[c]));
    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) sum += expf(__bfloat162float(xr[c]) - row_max);
    for (int c = 0; c < cols; ++c) orow[c] = __float2bfloat16(expf(__bfloat162float(xr[c]) - row_max) / sum);
}

extern "C" cudaError_t softmax(const __nv_bfloat16* x, __nv_bfloat16* out, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    int block = SOFTMAX_BLOCK;
    int grid = (rows + block - 1) / block;
    softmax_naive_kernel<<<grid, block, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
