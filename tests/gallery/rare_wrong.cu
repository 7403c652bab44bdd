// pitfall: 17
// expect: INCORRECT
// dynamic: INCORRECT wrong_values
// why: correct except on about 1% of rows (those whose first element's bit pattern is 0 mod 97), where it writes 0; a check of a few sampled elements or a single small shape would miss it, a check of every element of every shape and seed does not
#include <cuda_runtime.h>

__global__ void rare_kernel(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* row = x + (long long)r * cols;
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += row[c];
    out[r] = (__float_as_uint(row[0]) % 97u == 0u) ? 0.0f : s;
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    rare_kernel<<<(rows + 255) / 256, 256, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
