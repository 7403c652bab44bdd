// Strided gather-copy where the unroll hint sits inside a helper macro (_Pragma), as libraries do
// to unroll loops written by a macro; the per-thread count is a namespace-scope constexpr.
namespace tuning {
constexpr int kVecsPerThread = 4;
}

#define UNROLLED_FOR(var, n) _Pragma("unroll") for (int var = 0; var < (n); ++var)

__global__ void gather_copy(const float2* __restrict__ src, const int* __restrict__ perm, float2* __restrict__ dst, int n)
{
    const int base = blockIdx.x * blockDim.x * tuning::kVecsPerThread + threadIdx.x;
    float2 v[tuning::kVecsPerThread];
    UNROLLED_FOR(k, tuning::kVecsPerThread) {
        int i = base + k * blockDim.x;
        v[k] = i < n ? src[perm[i]] : make_float2(0.f, 0.f);
    }
    UNROLLED_FOR(k, tuning::kVecsPerThread) {
        int i = base + k * blockDim.x;
        if (i < n) dst[i] = v[k];
    }
}
