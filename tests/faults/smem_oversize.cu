// fault: launch_resources
// expect: RUNTIME_ERROR
// why: asks for 1 GiB of dynamic shared memory per block (the H200 has 228 KiB per SM); the launch is refused with cudaErrorInvalidValue, a non-sticky error, so the worker keeps its context
#include <cuda_runtime.h>

__global__ void rs_kernel(const float* x, float* out, int rows, int cols) {
    extern __shared__ float scratch[];
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += x[(long long)r * cols + c];
    scratch[threadIdx.x] = s;
    out[r] = scratch[threadIdx.x];
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    size_t smem = (size_t)1 << 30;
    rs_kernel<<<(rows + 255) / 256, 256, smem, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
