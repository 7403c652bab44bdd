// Block sum: every warp reduces with __shfl_down_sync (an explicit unrolled ladder of offsets),
// warp totals go through a small shared array, and the first warp reduces those again.
#define FULL_MASK 0xffffffffu

static __device__ __forceinline__ float warp_reduce_sum(float val)
{
    val += __shfl_down_sync(FULL_MASK, val, 16);
    val += __shfl_down_sync(FULL_MASK, val, 8);
    val += __shfl_down_sync(FULL_MASK, val, 4);
    val += __shfl_down_sync(FULL_MASK, val, 2);
    val += __shfl_down_sync(FULL_MASK, val, 1);
    return val;
}

__global__ void block_sum(const float* in, float* out, int n)
{
    __shared__ float warp_totals[32];
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;

    float v = 0.0f;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v = __ldg(&in[i]);

    v = warp_reduce_sum(v);
    if (lane == 0) warp_totals[warp] = v;
    __syncthreads();

    if (warp == 0) {
        v = lane < blockDim.x / 32 ? warp_totals[lane] : 0.0f;
        v = warp_reduce_sum(v);
        if (lane == 0) atomicAdd(out, v);
    }
}
