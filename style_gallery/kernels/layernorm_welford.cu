// LayerNorm forward with Welford statistics: each thread accumulates (count, mean, M2) over its
// float4 chunks, the warp merges the triples with shfl_xor (three shuffles and a merge per step),
// and the block merges the warps through shared memory.
#include <cuda_runtime.h>

struct Welford { float n, mean, m2; };

__device__ __forceinline__ Welford welford_merge(const Welford& a, const Welford& b)
{
    float n = a.n + b.n;
    if (n == 0.f) return a;
    float delta = b.mean - a.mean;
    float nb_over_n = b.n / n;
    Welford r;
    r.n = n;
    r.mean = a.mean + delta * nb_over_n;
    r.m2 = a.m2 + b.m2 + delta * delta * a.n * nb_over_n;
    return r;
}

__device__ __forceinline__ Welford warp_welford(Welford w)
{
    for (int lane_mask = 16; lane_mask > 0; lane_mask /= 2) {
        Welford o;
        o.n    = __shfl_xor_sync(0xffffffff, w.n, lane_mask);
        o.mean = __shfl_xor_sync(0xffffffff, w.mean, lane_mask);
        o.m2   = __shfl_xor_sync(0xffffffff, w.m2, lane_mask);
        w = welford_merge(w, o);
    }
    return w;
}

__global__ void layernorm_fwd(const float* __restrict__ X, const float* __restrict__ gamma,
                              const float* __restrict__ beta, float* __restrict__ Y, int D, float eps)
{
    __shared__ Welford warp_stats[32];
    __shared__ float s_mean, s_rstd;
    const float4* x4 = reinterpret_cast<const float4*>(X + (size_t)blockIdx.x * D);
    float4* y4 = reinterpret_cast<float4*>(Y + (size_t)blockIdx.x * D);
    const int D4 = D >> 2;

    Welford w = {0.f, 0.f, 0.f};
    for (int i = threadIdx.x; i < D4; i += blockDim.x) {
        float4 v = x4[i];
        float xs[4] = {v.x, v.y, v.z, v.w};
        for (int j = 0; j < 4; ++j) {
            w.n += 1.f;
            float d = xs[j] - w.mean;
            w.mean += d / w.n;
            w.m2 += d * (xs[j] - w.mean);
        }
    }
    w = warp_welford(w);
    if ((threadIdx.x & 31) == 0) warp_stats[threadIdx.x >> 5] = w;
    __syncthreads();
    if (threadIdx.x < 32) {
        Welford z = {0.f, 0.f, 0.f};
        w = threadIdx.x < (blockDim.x >> 5) ? warp_stats[threadIdx.x] : z;
        w = warp_welford(w);
        if (threadIdx.x == 0) { s_mean = w.mean; s_rstd = rsqrtf(w.m2 / w.n + eps); }
    }
    __syncthreads();
    const float4* g4 = reinterpret_cast<const float4*>(gamma);
    const float4* b4 = reinterpret_cast<const float4*>(beta);
    for (int i = threadIdx.x; i < D4; i += blockDim.x) {
        float4 v = x4[i], g = g4[i], b = b4[i];
        v.x = (v.x - s_mean) * s_rstd * g.x + b.x;
        v.y = (v.y - s_mean) * s_rstd * g.y + b.y;
        v.z = (v.z - s_mean) * s_rstd * g.z + b.z;
        v.w = (v.w - s_mean) * s_rstd * g.w + b.w;
        y4[i] = v;
    }
}
