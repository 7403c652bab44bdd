// fault: compile_error
// expect: COMPILE_ERROR
// why: a type error and a missing semicolon; nvcc must fail and the gate must report it
#include <cuda_runtime.h>

__global__ void rs_kernel(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    float4 s = x[r];  // error: float cannot initialize a float4
    out[r] = s
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    rs_kernel<<<(rows + 255) / 256, 256, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
