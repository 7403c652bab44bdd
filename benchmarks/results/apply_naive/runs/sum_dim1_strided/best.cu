// Sum over dimension 1 of an fp32 [outer, reduce, inner] tensor -> [outer, inner]. One thread per
// output element, its flat index split into (outer, inner) coordinates; it walks the reduced dimension,
// whose elements lie `inner` apart.
#include <cuda_runtime.h>

#define BLOCK_SIZE 256

#ifndef SUM_DIM1_ROW_THREADS
#define SUM_DIM1_ROW_THREADS 512  // threads per block: 32 lines a block, SUM_DIM1_ROW_THREADS / 32 warps splitting each
#endif
static_assert(SUM_DIM1_ROW_THREADS >= 64 && SUM_DIM1_ROW_THREADS <= 1024 && (SUM_DIM1_ROW_THREADS & (SUM_DIM1_ROW_THREADS - 1)) == 0, "SUM_DIM1_ROW_THREADS (threads per block) must be a power of two from 64 to 1024");
__device__ __forceinline__ float kl_row_sum(float v) {
    // a line's threads (one lane of each warp) meet in a shared-memory tree across the warps
    // (blockDim.x / 32 a power of two); every thread gets its line's result
    __shared__ float kl_tree[1024];
    const unsigned t = threadIdx.x;
    kl_tree[t] = v;
    __syncthreads();
    for (unsigned o = blockDim.x / 2; o >= 32; o >>= 1) {
        if (t < o) kl_tree[t] = kl_tree[t] + kl_tree[t + o];
        __syncthreads();
    }
    v = kl_tree[t % 32];
    __syncthreads();
    return v;
}

__global__ void sum_reduce_kernel(const float* x, float* out, int outer, int reduce, int inner) {
    const long long kl_line = (long long)blockIdx.x * 32 + threadIdx.x % 32;  // this thread's line: 32 neighbouring lines a block, one per lane
    int idx = kl_line < (outer * inner) ? kl_line : (outer * inner) - 1;
    if (idx >= outer * inner) return;
    const int kl_t = kl_line < (outer * inner) ? (int)(threadIdx.x / 32) : (1 << 30), kl_n = blockDim.x / 32;  // the warp, and the warps sharing the line (none past the last line)
    int o = idx / inner;
    int i = idx % inner;
    float acc = 0.0f;
    for (int r = kl_t; r < reduce; r += kl_n) {
        acc += x[(o * reduce + r) * inner + i];
    }
    acc = kl_row_sum(acc);
    if (kl_t == 0) out[idx] = acc;
}

extern "C" cudaError_t sum_dim1(const float* x, float* out, int outer, int reduce, int inner, cudaStream_t stream) {
    int total = outer * inner;
    sum_reduce_kernel<<<(outer * inner + 31) / 32, SUM_DIM1_ROW_THREADS, 0, stream>>>(x, out, outer, reduce, inner);
    return cudaGetLastError();
}
