// axpby naive: out = alpha * x + beta * y over flat fp32 vectors. One thread per element, scalar
// loads and stores, 64-bit indices (n is a 64-bit argument). Deliberately plain (no __restrict__,
// vector access, grid-stride coarsening, unrolling or launch bounds): the baseline an apply stage
// optimizes. Safe in place (each thread reads its elements before writing its own).
#include <cuda_runtime.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef AXPBY_BLOCK
#define AXPBY_BLOCK 256   // threads per block
#endif

__global__ void axpby_naive_kernel(const float* x, const float* y, float* out, long long n, float alpha,
                                   float beta) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = alpha * x[i] + beta * y[i];
}

extern "C" cudaError_t axpby(const float* x, const float* y, float* out, long long n, float alpha, float beta, cudaStream_t stream) {
    if (n < 0) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    long long grid = (n + AXPBY_BLOCK - 1) / AXPBY_BLOCK;
    axpby_naive_kernel<<<(unsigned)grid, AXPBY_BLOCK, 0, stream>>>(x, y, out, n, alpha, beta);
    return cudaGetLastError();
}
