// pitfall: 8
// expect: INCORRECT
// dynamic: INCORRECT wrong_values
// why: copies the first element of each row to the output instead of summing the row
#include <cuda_runtime.h>

__global__ void copy_kernel(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) out[r] = x[(long long)r * cols];
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    copy_kernel<<<(rows + 255) / 256, 256, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
