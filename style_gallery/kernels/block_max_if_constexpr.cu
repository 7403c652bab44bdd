// Row maximum, a block per row: a block-wide max written once for every block size with C++17
// `if constexpr` steps on the template size, each halving the live threads, and a shuffled last warp.
#include <float.h>

template <int BLOCK>
__device__ __forceinline__ float block_max(float v, float* red) {
    const int t = threadIdx.x;
    red[t] = v;
    __syncthreads();
    if constexpr (BLOCK >= 1024) { if (t < 512) red[t] = fmaxf(red[t], red[t + 512]); __syncthreads(); }
    if constexpr (BLOCK >= 512) { if (t < 256) red[t] = fmaxf(red[t], red[t + 256]); __syncthreads(); }
    if constexpr (BLOCK >= 256) { if (t < 128) red[t] = fmaxf(red[t], red[t + 128]); __syncthreads(); }
    if constexpr (BLOCK >= 128) { if (t < 64) red[t] = fmaxf(red[t], red[t + 64]); __syncthreads(); }
    if constexpr (BLOCK >= 64) { if (t < 32) red[t] = fmaxf(red[t], red[t + 32]); __syncthreads(); }
    if (t < 32) {
        float w = red[t];
        for (int o = 16; o > 0; o >>= 1) w = fmaxf(w, __shfl_xor_sync(0xffffffff, w, o));
        if (t == 0) red[0] = w;
    }
    __syncthreads();
    float r = red[0];
    __syncthreads();
    return r;
}

template <int BLOCK>
__global__ void row_max(const float* __restrict__ x, float* __restrict__ out, int cols) {
    __shared__ float red[BLOCK];
    const float* row = x + (size_t)blockIdx.x * cols;
    float m = -FLT_MAX;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, row[c]);
    m = block_max<BLOCK>(m, red);
    if (threadIdx.x == 0) out[blockIdx.x] = m;
}

template __global__ void row_max<256>(const float* __restrict__, float* __restrict__, int);
