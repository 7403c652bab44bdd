// klineage-step: mechanism=block_per_row
// One CE_BLOCK-thread block per row instead of one thread: threads stride the row, so loads coalesce
// into full lines; the row max and then the sum of expf(x - max) meet in shared-memory trees.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <float.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef CE_BLOCK
#define CE_BLOCK 256   // threads per block, one block per row (a power of two, >= 32)
#endif

static_assert(CE_BLOCK >= 32 && CE_BLOCK <= 1024 && (CE_BLOCK & (CE_BLOCK - 1)) == 0,
              "CE_BLOCK must be a power of two in [32, 1024]");

__global__ void cross_entropy_block_kernel(const __nv_bfloat16* __restrict__ logits,
                                           const long long* __restrict__ labels,
                                           float* __restrict__ loss, int batch, int vocab) {
    __shared__ float s_tree[CE_BLOCK];
    const int tid = threadIdx.x;
    const long long b = blockIdx.x;
    const __nv_bfloat16* row = logits + b * (long long)vocab;

    // Thread 0 fetches the target logit first: its two dependent loads overlap the row stream.
    float target = 0.0f;
    if (tid == 0) {
        const long long label = labels[b];
        target = (label >= 0 && label < vocab) ? __bfloat162float(row[label])
                                               : __int_as_float(0x7fc00000);
    }

    // pass 1: the row max
    float row_max = -FLT_MAX;
    for (int c = tid; c < vocab; c += CE_BLOCK) row_max = fmaxf(row_max, __bfloat162float(row[c]));
    s_tree[tid] = row_max;
    __syncthreads();
    for (int o = CE_BLOCK / 2; o > 0; o >>= 1) {
        if (tid < o) s_tree[tid] = fmaxf(s_tree[tid], s_tree[tid + o]);
        __syncthreads();
    }
    row_max = s_tree[0];
    __syncthreads();  // every thread has read the max before the tree is reused

    // pass 2: the sum of exponentials against the row max (the row is read again)
    float sum = 0.0f;
    for (int c = tid; c < vocab; c += CE_BLOCK) sum += expf(__bfloat162float(row[c]) - row_max);
    s_tree[tid] = sum;
    __syncthreads();
    for (int o = CE_BLOCK / 2; o > 0; o >>= 1) {
        if (tid < o) s_tree[tid] += s_tree[tid + o];
        __syncthreads();
    }
    if (tid == 0) loss[b] = row_max + logf(s_tree[0]) - target;
}

extern "C" cudaError_t cross_entropy_bf16(const __nv_bfloat16* logits, const long long* labels, float* loss, int batch, int vocab, cudaStream_t stream) {
    if (batch <= 0) return cudaSuccess;
    cross_entropy_block_kernel<<<batch, CE_BLOCK, 0, stream>>>(logits, labels, loss, batch, vocab);
    return cudaGetLastError();
}
