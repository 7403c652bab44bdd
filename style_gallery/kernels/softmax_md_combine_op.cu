// Row softmax after the online-normalizer paper: every element is a (max, denominator) pair, and
// pairs are merged by one associative operator, per element, across the warp and across warps.
#include <float.h>

struct __align__(8) MD {
    float m;
    float d;
};

__device__ __forceinline__ MD md_merge(MD a, MD b) {
    bool a_bigger = a.m > b.m;
    MD big = a_bigger ? a : b;
    MD small = a_bigger ? b : a;
    MD res;
    res.d = big.d + small.d * __expf(small.m - big.m);
    res.m = big.m;
    return res;
}

template <int THREADS>
__global__ void online_softmax_block(const float* __restrict__ x, float* __restrict__ y, int V) {
    __shared__ MD warp_md[THREADS / 32];
    __shared__ MD total;
    const float* row = x + (size_t)blockIdx.x * V;
    float* dst = y + (size_t)blockIdx.x * V;

    MD part = {-FLT_MAX, 0.0f};
    for (int i = threadIdx.x; i < V; i += THREADS) {
        MD e = {row[i], 1.0f};
        part = md_merge(part, e);
    }
    for (int mask = 16; mask > 0; mask >>= 1) {
        MD other;
        other.m = __shfl_xor_sync(0xffffffffu, part.m, mask);
        other.d = __shfl_xor_sync(0xffffffffu, part.d, mask);
        part = md_merge(part, other);
    }
    if (threadIdx.x % 32 == 0) warp_md[threadIdx.x / 32] = part;
    __syncthreads();
    if (threadIdx.x == 0) {
        MD t = warp_md[0];
        for (int w = 1; w < THREADS / 32; ++w) t = md_merge(t, warp_md[w]);
        total = t;
    }
    __syncthreads();
    float inv = __fdividef(1.0f, total.d);
    for (int i = threadIdx.x; i < V; i += THREADS) dst[i] = __expf(row[i] - total.m) * inv;
}

template __global__ void online_softmax_block<256>(const float* __restrict__, float* __restrict__, int);
