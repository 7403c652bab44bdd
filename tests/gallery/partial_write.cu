// pitfall: 8
// expect: INCORRECT
// dynamic: INCORRECT wrong_values
// why: computes correct sums for only the first half of the rows; the rest keep the NaN prefill
#include <cuda_runtime.h>

__global__ void half_rows_kernel(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows / 2) return;  // rows past the first half are never written
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += x[(long long)r * cols + c];
    out[r] = s;
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    half_rows_kernel<<<(rows + 255) / 256, 256, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
