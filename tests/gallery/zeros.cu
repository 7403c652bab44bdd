// pitfall: 8
// expect: INCORRECT
// dynamic: INCORRECT wrong_values
// why: writes 0 to every output without reading x; only a value check can catch it
#include <cuda_runtime.h>

__global__ void zeros_kernel(float* out, int rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) out[r] = 0.0f;
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    zeros_kernel<<<(rows + 255) / 256, 256, 0, stream>>>(out, rows);
    return cudaGetLastError();
}
