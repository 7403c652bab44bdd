// klineage-step: mechanism=warp_reduction
// The block max and sum are __shfl_xor_sync butterflies within each warp, then one shared slot per
// warp and a second butterfly, instead of a shared-memory tree with a __syncthreads per level.
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

    // pass 1: the row max
    float row_max = -FLT_MAX;
    for (int c = tid; c < vocab; c += CE_BLOCK) row_max = fmaxf(row_max, row[c]);
    row_max = block_max(row_max, s_warp);

    // pass 2: the sum of exponentials against the row max (the row is read again)
    float sum = 0.0f;
    for (int c = tid; c < vocab; c += CE_BLOCK) sum += expf(row[c] - row_max);
    sum = block_sum(sum, s_warp);
    if (tid == 0) loss[b] = row_max + logf(sum) - target;
}

extern "C" cudaError_t cross_entropy(const float* logits, const long long* labels, float* loss, int batch, int vocab, cudaStream_t stream) {
    if (batch <= 0) return cudaSuccess;
    cross_entropy_block_kernel<<<batch, CE_BLOCK, 0, stream>>>(logits, labels, loss, batch, vocab);
    return cudaGetLastError();
}
