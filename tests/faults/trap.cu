// fault: trap
// expect: RUNTIME_ERROR
// why: every thread executes __trap(), aborting the kernel with an unspecified launch failure
#include <cuda_runtime.h>

__global__ void trap_kernel(float* out, int rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) out[r] = 0.0f;
    __trap();
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    trap_kernel<<<(rows + 255) / 256, 256, 0, stream>>>(out, rows);
    return cudaGetLastError();
}
