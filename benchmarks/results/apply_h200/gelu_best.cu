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
#ifndef GELU_ITEMS_PER_THREAD
#define GELU_ITEMS_PER_THREAD 2   // items per thread: elements, or 16-byte vectors (coarsening; 1: off)
#endif

__global__ void gelu_naive_kernel(const __nv_bfloat16* x, __nv_bfloat16* out, long long n) {
    // vector_access: every thread takes GELU_ITEMS_PER_THREAD block-strided 16-byte vectors: 8
    // consecutive elements of each of x, out. A vector that lies wholly below n while every base
    // pointer is 16-byte aligned is read and written as one uint4; otherwise element by element
    // (the n % 8 tail, a misaligned base). Every load comes before any store: an in-place call
    // reads each element before it is overwritten.
    const bool aligned = (((unsigned long long)x | (unsigned long long)out) & 15ull) == 0;
    const long long base = (long long)blockIdx.x * blockDim.x * GELU_ITEMS_PER_THREAD + threadIdx.x;
    __nv_bfloat16 x_v[GELU_ITEMS_PER_THREAD][8];
    __nv_bfloat16 out_v[GELU_ITEMS_PER_THREAD][8];
    for (int c = 0; c < GELU_ITEMS_PER_THREAD; ++c) {
        const long long e = (base + (long long)c * blockDim.x) * 8;
        if (e >= n) break;
        if (aligned && e + 8 <= n) {
            const uint4 x_vec = *reinterpret_cast<const uint4*>(x + e);
            x_v[c][0] = __ushort_as_bfloat16((unsigned short)x_vec.x); x_v[c][1] = __ushort_as_bfloat16((unsigned short)(x_vec.x >> 16));
            x_v[c][2] = __ushort_as_bfloat16((unsigned short)x_vec.y); x_v[c][3] = __ushort_as_bfloat16((unsigned short)(x_vec.y >> 16));
            x_v[c][4] = __ushort_as_bfloat16((unsigned short)x_vec.z); x_v[c][5] = __ushort_as_bfloat16((unsigned short)(x_vec.z >> 16));
            x_v[c][6] = __ushort_as_bfloat16((unsigned short)x_vec.w); x_v[c][7] = __ushort_as_bfloat16((unsigned short)(x_vec.w >> 16));
        } else {
            for (int k = 0; k < 8 && e + k < n; ++k) {
                x_v[c][k] = x[e + k];
            }
        }
    }
    for (int c = 0; c < GELU_ITEMS_PER_THREAD; ++c) {
        const long long e = (base + (long long)c * blockDim.x) * 8;
        if (e >= n) break;
        for (int k = 0; k < 8; ++k) {
            if (e + k >= n) break;
            float v = __bfloat162float(x_v[c][k]);
            float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
            out_v[c][k] = __float2bfloat16(0.5f * v * (1.0f + tanhf(u)));
        }
        if (aligned && e + 8 <= n) {
            *reinterpret_cast<uint4*>(out + e) = make_uint4(
                (unsigned)__bfloat16_as_ushort(out_v[c][0]) | ((unsigned)__bfloat16_as_ushort(out_v[c][1]) << 16),
                (unsigned)__bfloat16_as_ushort(out_v[c][2]) | ((unsigned)__bfloat16_as_ushort(out_v[c][3]) << 16),
                (unsigned)__bfloat16_as_ushort(out_v[c][4]) | ((unsigned)__bfloat16_as_ushort(out_v[c][5]) << 16),
                (unsigned)__bfloat16_as_ushort(out_v[c][6]) | ((unsigned)__bfloat16_as_ushort(out_v[c][7]) << 16));
        } else {
            for (int k = 0; k < 8 && e + k < n; ++k) {
                out[e + k] = out_v[c][k];
            }
        }
    }
}

extern "C" cudaError_t gelu(const __nv_bfloat16* x, __nv_bfloat16* out, int rows, int cols, cudaStream_t stream) {
    long long n = (long long)rows * cols;
    if (n <= 0) return cudaSuccess;
    long long grid = (n + 8 * GELU_ITEMS_PER_THREAD * GELU_BLOCK - 1) / (8 * GELU_ITEMS_PER_THREAD * GELU_BLOCK);
    gelu_naive_kernel<<<(unsigned)grid, GELU_BLOCK, 0, stream>>>(x, out, n);
    return cudaGetLastError();
}
