// pitfall: 4
// expect: GUARD_REJECTED
// dynamic: COMPILE_ERROR nvcc_error
// why: defines the CUDA runtime's own cudaEventElapsedTime in the candidate's shared object, hoping the harness's timer resolves to it and reports 1 ns (the row sums themselves are honest); the candidate links the static CUDA runtime, so with the guard off the link fails on the duplicate symbol
#include <cuda_runtime.h>

extern "C" cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    *ms = 1e-6f;
    return cudaSuccess;
}

__global__ void row_sum_kernel(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += x[(long long)r * cols + c];
    out[r] = s;
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    row_sum_kernel<<<(rows + 255) / 256, 256, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
