// klineage-step: mechanism=online_softmax
// One pass over the row instead of two: each thread keeps a running max m and a sum s of exp(x - m),
// rescaling s whenever m grows; the block then combines the (m, s) pairs. Half the bytes read.
#include <cuda_runtime.h>
#include <float.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef CE_BLOCK
#define CE_BLOCK 512   // threads per block, one block per row (a power of two, >= 32)
#endif

static_assert(CE_BLOCK >= 32 && CE_BLOCK <= 1024 && (CE_BLOCK & (CE_BLOCK - 1)) == 0,
              "CE_BLOCK must be a power of two in [32, 1024]");

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide max / sum, the result in every thread: each warp reduces the CE_BLOCK / 32 warp
// partials itself (no broadcast step). The trailing barrier lets the caller reuse s_warp.
__device__ __forceinline__ float block_max(float v, float* s_warp) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max(v);
    if (lane == 0) s_warp[warp] = v;
    __syncthreads();
    v = warp_max(lane < CE_BLOCK / 32 ? s_warp[lane] : -FLT_MAX);
    __syncthreads();
    return v;
}

__device__ __forceinline__ float block_sum(float v, float* s_warp) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) s_warp[warp] = v;
    __syncthreads();
    v = warp_sum(lane < CE_BLOCK / 32 ? s_warp[lane] : 0.0f);
    __syncthreads();
    return v;
}

// One element into a running (max, sum of exp(x - max)) pair. m starts at -FLT_MAX, not -inf, so
// m - m_new is never inf - inf.
__device__ __forceinline__ void online_update(float& m, float& s, float x) {
    const float m_new = fmaxf(m, x);
    s = s * expf(m - m_new) + expf(x - m_new);
    m = m_new;
}

__global__ void cross_entropy_block_kernel(const float* __restrict__ logits,
                                           const long long* __restrict__ labels,
                                           float* __restrict__ loss, int batch, int vocab) {
    __shared__ float s_warp[CE_BLOCK / 32];
    const int tid = threadIdx.x;
    const long long b = blockIdx.x;
    const float* row = logits + b * (long long)vocab;

    // Thread 0 fetches the target logit first: its two dependent loads overlap the row stream.
    float target = 0.0f;
    if (tid == 0) {
        const long long label = labels[b];
        target = (label >= 0 && label < vocab) ? row[label] : __int_as_float(0x7fc00000);
    }

    // one pass: this thread's running max and sum of exponentials
    float m = -FLT_MAX, s = 0.0f;
    for (int c = tid; c < vocab; c += CE_BLOCK) online_update(m, s, row[c]);

    // combine the (m, s) pairs: the block max, each partial rescaled to it, then the block sum
    const float row_max = block_max(m, s_warp);
    const float sum = block_sum(s * expf(m - row_max), s_warp);
    if (tid == 0) loss[b] = row_max + logf(sum) - target;
}

extern "C" cudaError_t cross_entropy(const float* logits, const long long* labels, float* loss, int batch, int vocab, cudaStream_t stream) {
    if (batch <= 0) return cudaSuccess;
    cross_entropy_block_kernel<<<batch, CE_BLOCK, 0, stream>>>(logits, labels, loss, batch, vocab);
    return cudaGetLastError();
}
