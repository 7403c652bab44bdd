// RMSNorm over the channels of an fp32 [batch, channels, spatial] tensor (dimension 1), one weight per
// channel. One thread per (batch, spatial) position, its flat index split into the two; the channel's
// elements lie `spatial` apart, reached through pointers to the position's first one.
#include <cuda_runtime.h>

#ifndef RMSNORM_CHANNELS_ROW_THREADS
#define RMSNORM_CHANNELS_ROW_THREADS 512  // threads per block: 32 lines a block, RMSNORM_CHANNELS_ROW_THREADS / 32 warps splitting each
#endif
static_assert(RMSNORM_CHANNELS_ROW_THREADS >= 64 && RMSNORM_CHANNELS_ROW_THREADS <= 1024 && (RMSNORM_CHANNELS_ROW_THREADS & (RMSNORM_CHANNELS_ROW_THREADS - 1)) == 0, "RMSNORM_CHANNELS_ROW_THREADS (threads per block) must be a power of two from 64 to 1024");
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

__global__ void rmsnorm_channels_kernel(const float* input, const float* weight, float* output, int batch,
                                        int channels, int spatial, float eps) {
    const long long kl_line = (long long)blockIdx.x * 32 + threadIdx.x % 32;  // this thread's line: 32 neighbouring lines a block, one per lane
    int idx = kl_line < (batch * spatial) ? kl_line : (batch * spatial) - 1;
    int total = batch * spatial;
    if (idx >= total) return;
    const int kl_t = kl_line < (batch * spatial) ? (int)(threadIdx.x / 32) : (1 << 30), kl_n = blockDim.x / 32;  // the warp, and the warps sharing the line (none past the last line)
    int n = idx / spatial;
    int s = idx % spatial;
    const float* base_in = input + n * channels * spatial + s;
    float* base_out = output + n * channels * spatial + s;
    float sum_sq = 0.0f;
    for (int c = kl_t; c < channels; c += kl_n) {
        float v = base_in[c * spatial];
        sum_sq += v * v;
    }
    sum_sq = kl_row_sum(sum_sq);
    float rms = sqrtf(sum_sq / channels + eps);
    for (int c = kl_t; c < channels; c += kl_n) {
        base_out[c * spatial] = base_in[c * spatial] / rms * weight[c];
    }
}

extern "C" cudaError_t rmsnorm_channels(const float* input, const float* weight, float* output, int batch,
                                        int channels, int spatial, float eps, cudaStream_t stream) {
    const int threads = RMSNORM_CHANNELS_ROW_THREADS;
    const int total = batch * spatial;
    const int blocks = (batch * spatial + 31) / 32;
    rmsnorm_channels_kernel<<<blocks, threads, 0, stream>>>(input, weight, output, batch, channels, spatial, eps);
    return cudaGetLastError();
}
