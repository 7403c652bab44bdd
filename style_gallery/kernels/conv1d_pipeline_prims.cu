// 1-D convolution over a long signal: tiles of the input are prefetched with the CUDA pipeline
// primitives (__pipeline_memcpy_async) into a ring of STAGES buffers, keeping STAGES-1 tiles in
// flight; the filter taps sit in registers.
#include <cuda_pipeline.h>

#define STAGES 3
#define TILE 256
#define TAPS 9

__global__ void conv1d_prefetch(const float* __restrict__ x, const float* __restrict__ w,
                                float* __restrict__ y, int ntiles)
{
    __shared__ float ring[STAGES][TILE + TAPS - 1];
    float taps[TAPS];
#pragma unroll
    for (int t = 0; t < TAPS; ++t) taps[t] = w[t];

    const float* base = x + (size_t)blockIdx.x * ntiles * TILE;
    for (int s = 0; s < STAGES - 1 && s < ntiles; ++s) {
        for (int i = threadIdx.x; i < TILE + TAPS - 1; i += blockDim.x)
            __pipeline_memcpy_async(&ring[s][i], base + s * TILE + i, sizeof(float));
        __pipeline_commit();
    }
    for (int t = 0; t < ntiles; ++t) {
        int pre = t + STAGES - 1;
        if (pre < ntiles)
            for (int i = threadIdx.x; i < TILE + TAPS - 1; i += blockDim.x)
                __pipeline_memcpy_async(&ring[pre % STAGES][i], base + pre * TILE + i, sizeof(float));
        __pipeline_commit();
        __pipeline_wait_prior(STAGES - 1);
        __syncthreads();
        const float* tile = ring[t % STAGES];
        for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
            float acc = 0.f;
#pragma unroll
            for (int k = 0; k < TAPS; ++k) acc += taps[k] * tile[i + k];
            y[(size_t)blockIdx.x * ntiles * TILE + t * TILE + i] = acc;
        }
        __syncthreads();
    }
}
