// fault: device_oom
// expect: RUNTIME_ERROR
// why: every thread takes 1 MiB from the device heap with in-kernel malloc and never frees it; the heap (8 MiB unless the harness raises it) is exhausted within a few threads, malloc returns NULL, and the thread that gets NULL traps
#include <cuda_runtime.h>

__global__ void rs_kernel(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float* mine = static_cast<float*>(malloc((size_t)1 << 20));
    if (mine == nullptr) __trap();  // out of device heap
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += x[(long long)r * cols + c];
    mine[0] = s;
    out[r] = mine[0];
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    rs_kernel<<<(rows + 255) / 256, 256, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
