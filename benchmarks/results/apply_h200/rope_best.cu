// rope naive: rotary position embedding, rotate-half convention, bf16 x (tokens, heads, dim) with
// fp32 cos/sin tables (tokens, dim/2): out[..i] = x1*cos - x2*sin, out[..half+i] = x2*cos + x1*sin.
// One thread per rotation pair (i, i + half) of one token and head, so it reads both elements before
// writing either and is safe in place. Scalar loads and stores, 64-bit index math with a division
// and a modulo per thread, no reuse of a token's table row across heads beyond what the caches do.
// Deliberately plain: the baseline an apply stage optimizes.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef ROPE_BLOCK
#define ROPE_BLOCK 256   // threads per block (one rotation pair per thread)
#endif

__global__ void rope_naive_kernel(const __nv_bfloat16* x, const float* cos_tab, const float* sin_tab,
                                  __nv_bfloat16* out, long long pairs, int heads, int half) {
    long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= pairs) return;
    long long i = p % half;           // pair index within the head
    long long th = p / half;          // token * heads + head
    long long t = th / heads;         // token
    long long lo = th * (2LL * half) + i;
    long long hi = lo + half;
    float x1 = __bfloat162float(x[lo]);
    float x2 = __bfloat162float(x[hi]);
    float c = cos_tab[t * half + i];
    float s = sin_tab[t * half + i];
    out[lo] = __float2bfloat16(x1 * c - x2 * s);
    out[hi] = __float2bfloat16(x2 * c + x1 * s);
}

extern "C" cudaError_t rope(const __nv_bfloat16* x, const float* cos_tab, const float* sin_tab, __nv_bfloat16* out, int tokens, int heads, int dim, cudaStream_t stream) {
    if (dim % 2 != 0 || tokens < 0 || heads < 0 || dim < 0) return cudaErrorInvalidValue;
    int half = dim / 2;
    long long pairs = (long long)tokens * heads * half;
    if (pairs == 0) return cudaSuccess;
    long long grid = (pairs + ROPE_BLOCK - 1) / ROPE_BLOCK;
    rope_naive_kernel<<<(unsigned)grid, ROPE_BLOCK, 0, stream>>>(x, cos_tab, sin_tab, out, pairs, heads, half);
    return cudaGetLastError();
}
