// Moving-average filter over long rows: tiles of the row are prefetched with cp.async into a ring of
// kNumStages buffers, the stage index wrapping with `if (++stage == kNumStages) stage = 0`.
#include <cuda_pipeline.h>

constexpr int kNumStages = 4;
constexpr int kTileLen = 512;

__global__ void moving_average(const float* __restrict__ x, float* __restrict__ y, int tiles, float alpha)
{
    __shared__ float ring[kNumStages][kTileLen];
    const float* row = x + (size_t)blockIdx.x * tiles * kTileLen;
    for (int s = 0; s < kNumStages - 1 && s < tiles; ++s) {
        for (int i = threadIdx.x; i < kTileLen; i += blockDim.x)
            __pipeline_memcpy_async(&ring[s][i], row + s * kTileLen + i, sizeof(float));
        __pipeline_commit();
    }
    int stage = 0, fill = kNumStages - 1;
    float state = 0.f;
    for (int t = 0; t < tiles; ++t) {
        if (t + kNumStages - 1 < tiles)
            for (int i = threadIdx.x; i < kTileLen; i += blockDim.x)
                __pipeline_memcpy_async(&ring[fill][i], row + (t + kNumStages - 1) * kTileLen + i, sizeof(float));
        __pipeline_commit();
        if (++fill == kNumStages) fill = 0;
        __pipeline_wait_prior(kNumStages - 1);
        __syncthreads();
        if (threadIdx.x == 0)
            for (int i = 0; i < kTileLen; ++i) {
                state = alpha * ring[stage][i] + (1.f - alpha) * state;
                y[(size_t)blockIdx.x * tiles * kTileLen + t * kTileLen + i] = state;
            }
        __syncthreads();
        if (++stage == kNumStages) stage = 0;
    }
}
