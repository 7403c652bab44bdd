// fault: bad_launch
// expect: RUNTIME_ERROR
// why: launches with 2048 threads per block (the limit is 1024) and returns the launch error
#include <cuda_runtime.h>

__global__ void rs_kernel(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += x[(long long)r * cols + c];
    out[r] = s;
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    rs_kernel<<<(rows + 2047) / 2048, 2048, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();  // cudaErrorInvalidConfiguration
}
