// fault: device_oom
// expect: GUARD_REJECTED
// dynamic: RUNTIME_ERROR
// why: the host entry takes device memory in 1 GiB pieces until cudaMalloc fails, keeps all of it, and returns cudaErrorMemoryAllocation; the guard bans allocations in the entry, and with the guard off the worker must turn it into a record and be replaced (its device memory is gone)
#include <cuda_runtime.h>

__global__ void rs_kernel(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += x[(long long)r * cols + c];
    out[r] = s;
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    cudaError_t err = cudaSuccess;
    for (int i = 0; i < 4096 && err == cudaSuccess; ++i) {  // at most 4 TiB: far beyond any card
        void* grab = nullptr;
        err = cudaMalloc(&grab, (size_t)1 << 30);
    }
    if (err != cudaSuccess) return err;  // cudaErrorMemoryAllocation, with the memory still held
    rs_kernel<<<(rows + 255) / 256, 256, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
