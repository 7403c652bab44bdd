// axpby naive: out = alpha * x + beta * y over flat fp32 vectors. One thread per element, scalar
// loads and stores, 64-bit indices (n is a 64-bit argument). Deliberately plain (no __restrict__,
// vector access, grid-stride coarsening, unrolling or launch bounds): the baseline an apply stage
// optimizes. Safe in place (each thread reads its elements before writing its own).
#include <cuda_runtime.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef AXPBY_BLOCK
#define AXPBY_BLOCK 256   // threads per block
#endif
#ifndef AXPBY_ITEMS_PER_THREAD
#define AXPBY_ITEMS_PER_THREAD 1   // items per thread: elements, or 16-byte vectors (coarsening; 1: off)
#endif

__global__ void axpby_naive_kernel(const float* x, const float* y, float* out, long long n, float alpha,
                                   float beta) {
    // vector_access: every thread takes AXPBY_ITEMS_PER_THREAD block-strided 16-byte vectors: 4
    // consecutive elements of each of x, y, out. A vector that lies wholly below n while every base
    // pointer is 16-byte aligned is read and written as one float4; otherwise element by element
    // (the n % 4 tail, a misaligned base). Every load comes before any store: an in-place call
    // reads each element before it is overwritten.
    const bool aligned = (((unsigned long long)x | (unsigned long long)y | (unsigned long long)out) & 15ull) == 0;
    const long long base = (long long)blockIdx.x * blockDim.x * AXPBY_ITEMS_PER_THREAD + threadIdx.x;
    float x_v[AXPBY_ITEMS_PER_THREAD][4];
    float y_v[AXPBY_ITEMS_PER_THREAD][4];
    float out_v[AXPBY_ITEMS_PER_THREAD][4];
    for (int c = 0; c < AXPBY_ITEMS_PER_THREAD; ++c) {
        const long long e = (base + (long long)c * blockDim.x) * 4;
        if (e >= n) break;
        if (aligned && e + 4 <= n) {
            const float4 x_vec = *reinterpret_cast<const float4*>(x + e);
            x_v[c][0] = x_vec.x; x_v[c][1] = x_vec.y; x_v[c][2] = x_vec.z; x_v[c][3] = x_vec.w;
            const float4 y_vec = *reinterpret_cast<const float4*>(y + e);
            y_v[c][0] = y_vec.x; y_v[c][1] = y_vec.y; y_v[c][2] = y_vec.z; y_v[c][3] = y_vec.w;
        } else {
            for (int k = 0; k < 4 && e + k < n; ++k) {
                x_v[c][k] = x[e + k];
                y_v[c][k] = y[e + k];
            }
        }
    }
    for (int c = 0; c < AXPBY_ITEMS_PER_THREAD; ++c) {
        const long long e = (base + (long long)c * blockDim.x) * 4;
        if (e >= n) break;
        for (int k = 0; k < 4; ++k) {
            if (e + k >= n) break;
            out_v[c][k] = alpha * x_v[c][k] + beta * y_v[c][k];
        }
        if (aligned && e + 4 <= n) {
            *reinterpret_cast<float4*>(out + e) = make_float4(out_v[c][0], out_v[c][1], out_v[c][2], out_v[c][3]);
        } else {
            for (int k = 0; k < 4 && e + k < n; ++k) {
                out[e + k] = out_v[c][k];
            }
        }
    }
}

extern "C" cudaError_t axpby(const float* x, const float* y, float* out, long long n, float alpha, float beta, cudaStream_t stream) {
    if (n < 0) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    long long grid = (n + 4 * AXPBY_ITEMS_PER_THREAD * AXPBY_BLOCK - 1) / (4 * AXPBY_ITEMS_PER_THREAD * AXPBY_BLOCK);
    axpby_naive_kernel<<<(unsigned)grid, AXPBY_BLOCK, 0, stream>>>(x, y, out, n, alpha, beta);
    return cudaGetLastError();
}
