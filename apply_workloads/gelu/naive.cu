// gelu naive: out = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), bf16 in and out, fp32
// math. One thread per element, scalar bf16 loads and stores, full-precision tanhf. Deliberately
// plain (no __restrict__, vector access, unrolling, launch bounds or fast math): the baseline an
// apply stage optimizes. Safe in place (each thread reads its element before writing it).
#include <cuda_runtime.h>
#include <cuda_bf16.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef GELU_BLOCK
#define GELU_BLOCK 128   // threads per block
#endif

__global__ void gelu_naive_kernel(const __nv_bfloat16* x, __nv_bfloat16* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = __bfloat162float(x[i]);
    float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    out[i] = __float2bfloat16(0.5f * v * (1.0f + tanhf(u)));
}

extern "C" cudaError_t gelu(const __nv_bfloat16* x, __nv_bfloat16* out, int rows, int cols, cudaStream_t stream) {
    long long n = (long long)rows * cols;
    if (n <= 0) return cudaSuccess;
    long long grid = (n + GELU_BLOCK - 1) / GELU_BLOCK;
    gelu_naive_kernel<<<(unsigned)grid, GELU_BLOCK, 0, stream>>>(x, out, n);
    return cudaGetLastError();
}
