// RMSNorm over the channels of an fp32 [batch, channels, spatial] tensor (dimension 1), one weight per
// channel. One thread per (batch, spatial) position, its flat index split into the two; the channel's
// elements lie `spatial` apart, reached through pointers to the position's first one.
#include <cuda_runtime.h>

__global__ void rmsnorm_channels_kernel(const float* input, const float* weight, float* output, int batch,
                                        int channels, int spatial, float eps) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = batch * spatial;
    if (idx >= total) return;
    int n = idx / spatial;
    int s = idx % spatial;
    const float* base_in = input + n * channels * spatial + s;
    float* base_out = output + n * channels * spatial + s;
    float sum_sq = 0.0f;
    for (int c = 0; c < channels; ++c) {
        float v = base_in[c * spatial];
        sum_sq += v * v;
    }
    float rms = sqrtf(sum_sq / channels + eps);
    for (int c = 0; c < channels; ++c) {
        base_out[c * spatial] = base_in[c * spatial] / rms * weight[c];
    }
}

extern "C" cudaError_t rmsnorm_channels(const float* input, const float* weight, float* output, int batch,
                                        int channels, int spatial, float eps, cudaStream_t stream) {
    const int threads = 256;
    const int total = batch * spatial;
    const int blocks = (total + threads - 1) / threads;
    rmsnorm_channels_kernel<<<blocks, threads, 0, stream>>>(input, weight, output, batch, channels, spatial, eps);
    return cudaGetLastError();
}
