// fault: illegal_address
// expect: RUNTIME_ERROR
// why: writes through a wild device pointer far past any allocation; the context is lost (sticky error)
#include <cuda_runtime.h>

__global__ void wild_write(float* out, int rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) out[(1LL << 40) + r] = 1.0f;  // ~4 TB past the output buffer
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    wild_write<<<(rows + 255) / 256, 256, 0, stream>>>(out, rows);
    return cudaGetLastError();
}
