// pitfall: 7
// expect: INCORRECT
// dynamic: INCORRECT wrong_values
// why: writes NaN everywhere, hoping a comparison that treats NaN as a wildcard lets it through
#include <cuda_runtime.h>

__global__ void nan_kernel(float* out, int rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) out[r] = __int_as_float(0x7fc00000);  // quiet NaN
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    nan_kernel<<<(rows + 255) / 256, 256, 0, stream>>>(out, rows);
    return cudaGetLastError();
}
