// Single-pass softmax statistics per row: each thread keeps a running maximum and a running sum,
// updated with an if/else (the sum rescaled when a new maximum arrives), then the warp merges the
// (max, sum) pairs with xor shuffles, several statements per step.
#include <float.h>

struct MaxSum { float m; float s; };

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b)
{
    MaxSum r;
    if (a.m > b.m) {
        r.m = a.m;
        r.s = a.s + b.s * __expf(b.m - a.m);
    } else {
        r.m = b.m;
        r.s = b.s + a.s * __expf(a.m - b.m);
    }
    return r;
}

__global__ void softmax_stats(const float* __restrict__ logits, float2* __restrict__ stats, int cols)
{
    const float* row = logits + (size_t)blockIdx.x * cols;
    float m = -FLT_MAX, s = 0.f;
    for (int c = threadIdx.x; c < cols; c += 32) {
        float x = row[c];
        if (x > m) {
            s = s * __expf(m - x) + 1.f;
            m = x;
        } else {
            s += __expf(x - m);
        }
    }
    for (int mask = 16; mask >= 1; mask >>= 1) {
        MaxSum other;
        other.m = __shfl_xor_sync(0xffffffff, m, mask);
        other.s = __shfl_xor_sync(0xffffffff, s, mask);
        MaxSum mine = {m, s};
        MaxSum r = merge(mine, other);
        m = r.m;
        s = r.s;
    }
    if (threadIdx.x == 0) stats[blockIdx.x] = make_float2(m, s);
}
