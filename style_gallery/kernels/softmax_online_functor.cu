// Online-normalizer softmax statistics with a (m, d) functor: every thread folds its strided
// elements into the pair, a templated warp reduction applies the functor across lanes, and the
// block combines warps through shared memory.
#include <cfloat>

struct __align__(8) MD {
    float m;
    float d;
};

struct MDOp {
    __device__ __forceinline__ MD operator()(MD a, MD b) const
    {
        bool a_bigger = a.m > b.m;
        MD bigger = a_bigger ? a : b;
        MD smaller = a_bigger ? b : a;
        MD res;
        res.d = bigger.d + smaller.d * __expf(smaller.m - bigger.m);
        res.m = bigger.m;
        return res;
    }
};

template <typename T, typename Op>
__device__ __forceinline__ T warp_all_reduce(T v, Op op)
{
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) {
        T o;
        o.m = __shfl_xor_sync(0xffffffffu, v.m, s);
        o.d = __shfl_xor_sync(0xffffffffu, v.d, s);
        v = op(v, o);
    }
    return v;
}

template <int THREADS>
__global__ void __launch_bounds__(THREADS) online_softmax_md(const float* __restrict__ x, float* __restrict__ out, int n)
{
    __shared__ MD partial[THREADS / 32];
    const float* row = x + (size_t)blockIdx.x * n;
    MD md{-FLT_MAX, 0.f};
    for (int i = threadIdx.x; i < n; i += THREADS) {
        float v = row[i];
        float m_new = fmaxf(md.m, v);
        md.d = md.d * __expf(md.m - m_new) + __expf(v - m_new);
        md.m = m_new;
    }
    md = warp_all_reduce(md, MDOp());
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = md;
    __syncthreads();
    if (threadIdx.x < 32) {
        md = threadIdx.x < THREADS / 32 ? partial[threadIdx.x] : MD{-FLT_MAX, 0.f};
        md = warp_all_reduce(md, MDOp());
        if (threadIdx.x == 0) { out[2 * blockIdx.x] = md.m; out[2 * blockIdx.x + 1] = md.d; }
    }
}

template __global__ void online_softmax_md<256>(const float*, float*, int);
