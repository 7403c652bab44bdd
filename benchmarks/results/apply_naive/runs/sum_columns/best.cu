// Column sums of an fp32 [n_rows, n_cols] matrix (a sum over dimension 0) -> [n_cols], with size_t
// extents and a double accumulator. One thread per column, walking down it n_cols elements at a step.
#include <cuda_runtime.h>
#include <cstddef>

#ifndef COLSUM_THREADS
#define COLSUM_THREADS 1024  // threads per block: 32 lines a block, COLSUM_THREADS / 32 warps splitting each
#endif
static_assert(COLSUM_THREADS >= 64 && COLSUM_THREADS <= 1024 && (COLSUM_THREADS & (COLSUM_THREADS - 1)) == 0, "COLSUM_THREADS (threads per block) must be a power of two from 64 to 1024");

__device__ __forceinline__ double kl_row_sum(double v) {
    // a line's threads (one lane of each warp) meet in a shared-memory tree across the warps
    // (blockDim.x / 32 a power of two); every thread gets its line's result
    __shared__ double kl_tree[1024];
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

__global__ void colsum(const float* __restrict__ a, float* __restrict__ s, size_t n_rows, size_t n_cols) {
    const long long kl_line = (long long)blockIdx.x * 32 + threadIdx.x % 32;  // this thread's line: 32 neighbouring lines a block, one per lane
    const size_t col = kl_line < n_cols ? kl_line : n_cols - 1;
    if (col < n_cols) {
        const int kl_t = kl_line < n_cols ? (int)(threadIdx.x / 32) : (1 << 30), kl_n = blockDim.x / 32;  // the warp, and the warps sharing the line (none past the last line)
        double total = 0.0;
        for (size_t r = kl_t; r < n_rows; r += kl_n)
            total += a[r * n_cols + col];
        total = kl_row_sum(total);
        if (kl_t == 0) s[col] = (float)total;
    }
}

extern "C" cudaError_t column_sums(const float* a, float* s, long long n_rows, long long n_cols, cudaStream_t stream) {
    if (n_rows <= 0 || n_cols <= 0) return cudaSuccess;
    dim3 block(COLSUM_THREADS);
    dim3 grid((((size_t)n_cols) + 31) / 32);
    colsum<<<grid, block, 0, stream>>>(a, s, (size_t)n_rows, (size_t)n_cols);
    return cudaGetLastError();
}
