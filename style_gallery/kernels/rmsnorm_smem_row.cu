// RMSNorm that reads its row once: the row is copied into dynamic shared memory (the byte buffer
// reinterpreted as float4), the sum of squares is taken from shared memory, and the output pass
// reads the staged row again instead of going back to global memory.
extern "C" __global__ void rmsnorm_staged(const float* __restrict__ x, const float* __restrict__ weight,
                                          float* __restrict__ y, int d, float eps)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float4* row_s = reinterpret_cast<float4*>(smem_raw);
    __shared__ float warp_sums[32];

    const float4* row_g = reinterpret_cast<const float4*>(x) + (size_t)blockIdx.x * (d / 4);
    for (int i = threadIdx.x; i < d / 4; i += blockDim.x)
        row_s[i] = row_g[i];
    __syncthreads();

    float acc = 0.f;
    for (int i = threadIdx.x; i < d / 4; i += blockDim.x) {
        float4 v = row_s[i];
        acc += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    for (int o = 16; o > 0; o >>= 1)
        acc += __shfl_xor_sync(0xffffffff, acc, o);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
    __syncthreads();
    float total = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += warp_sums[w];
    const float scale = 1.0f / sqrtf(total / d + eps);

    const float4* w4 = reinterpret_cast<const float4*>(weight);
    float4* out = reinterpret_cast<float4*>(y) + (size_t)blockIdx.x * (d / 4);
    for (int i = threadIdx.x; i < d / 4; i += blockDim.x) {
        float4 v = row_s[i], g = w4[i];
        out[i] = make_float4(v.x * scale * g.x, v.y * scale * g.y, v.z * scale * g.z, v.w * scale * g.w);
    }
}
