// LayerNorm, one warp per row, the warp sum written as a statement macro (a loop inside the macro),
// fp16 input read as __half2 pairs, the inverse standard deviation from rsqrtf.
#include <cuda_fp16.h>

#define WARP_ALLREDUCE_SUM(x)                                   \
    for (int _mask = 16; _mask > 0; _mask >>= 1)                \
        (x) += __shfl_xor_sync(0xffffffffu, (x), _mask)

__global__ void layernorm_warp(const __half2* __restrict__ x, __half2* __restrict__ y, const float2* __restrict__ gb,
                               int rows, int half_cols, float eps)
{
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const __half2* xr = x + (size_t)row * half_cols;
    float sum = 0.f, sq = 0.f;
    for (int i = lane; i < half_cols; i += 32) {
        float2 f = __half22float2(xr[i]);
        sum += f.x + f.y;
        sq += f.x * f.x + f.y * f.y;
    }
    WARP_ALLREDUCE_SUM(sum);
    WARP_ALLREDUCE_SUM(sq);
    const float n = 2.f * half_cols;
    const float mean = sum / n;
    const float rstd = rsqrtf(sq / n - mean * mean + eps);
    for (int i = lane; i < half_cols; i += 32) {
        float2 f = __half22float2(xr[i]);
        float2 g = gb[2 * i], b = gb[2 * i + 1];
        y[(size_t)row * half_cols + i] = __floats2half2_rn((f.x - mean) * rstd * g.x + b.x,
                                                           (f.y - mean) * rstd * g.y + b.y);
    }
}
