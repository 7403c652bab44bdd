// LayerNorm backward for the input gradient: one block per row, partial sums of dy*gamma and
// dy*gamma*xhat kept per thread, loops unrolled by 4 (#pragma unroll 4), block sums through
// warp shuffles and shared memory, launch bounds with a minimum of 2 blocks per SM.
__inline__ __device__ float warp_sum(float v)
{
    for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_down_sync(0xffffffff, v, o);
    return v;
}

__inline__ __device__ float block_sum(float v, float* scratch)
{
    v = warp_sum(v);
    if (threadIdx.x % warpSize == 0) scratch[threadIdx.x / warpSize] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / warpSize ? scratch[threadIdx.x] : 0.f;
    if (threadIdx.x < warpSize) v = warp_sum(v);
    __syncthreads();
    return v;
}

__global__ void __launch_bounds__(512, 2) layernorm_bwd_dx(const float* __restrict__ dy, const float* __restrict__ x,
                                                         const float* __restrict__ gamma, const float* __restrict__ mean,
                                                         const float* __restrict__ rstd, float* __restrict__ dx, int D)
{
    __shared__ float scratch[32];
    __shared__ float s1, s2;
    const size_t off = (size_t)blockIdx.x * D;
    const float mu = mean[blockIdx.x], rs = rstd[blockIdx.x];
    float a = 0.f, b = 0.f;
#pragma unroll 4
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float g = dy[off + i] * gamma[i];
        a += g;
        b += g * (x[off + i] - mu) * rs;
    }
    a = block_sum(a, scratch);
    b = block_sum(b, scratch);
    if (threadIdx.x == 0) { s1 = a / D; s2 = b / D; }
    __syncthreads();
#pragma unroll 4
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float xhat = (x[off + i] - mu) * rs;
        dx[off + i] = rs * (dy[off + i] * gamma[i] - s1 - xhat * s2);
    }
}
