// Generic warp all-reduce over a functor, written with a while loop over the lane mask (halving),
// used for a row's sum of squares and its maximum absolute value.
struct Sum { __device__ float operator()(float a, float b) const { return a + b; } };
struct AbsMax { __device__ float operator()(float a, float b) const { return fmaxf(fabsf(a), fabsf(b)); } };

template <class Op>
__device__ float warp_allreduce(float v, Op op)
{
    int mask = 16;
    while (mask > 0) {
        v = op(v, __shfl_xor_sync(0xffffffff, v, mask));
        mask >>= 1;
    }
    return v;
}

__global__ void row_stats(const float* __restrict__ x, float2* __restrict__ stats, int cols)
{
    const float* r = x + (size_t)blockIdx.x * cols;
    float ss = 0.f, am = 0.f;
    for (int c = threadIdx.x; c < cols; c += 32) {
        float v = r[c];
        ss += v * v;
        am = fmaxf(am, fabsf(v));
    }
    ss = warp_allreduce(ss, Sum());
    am = warp_allreduce(am, AbsMax());
    if (threadIdx.x == 0) stats[blockIdx.x] = make_float2(ss, am);
}
