// Residual add in fp32 with the vector loads and stores hidden in small helpers (load4 / store4),
// the way many codebases wrap reinterpret_cast; a scalar tail handles n not divisible by 4.
__device__ __forceinline__ float4 load4(const float* __restrict__ p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void store4(float* p, const float4& v) { *reinterpret_cast<float4*>(p) = v; }

__global__ void residual_add(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int n)
{
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        float4 x = load4(a + i), y = load4(b + i);
        store4(c + i, make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w));
    } else {
        for (; i < n; ++i) c[i] = a[i] + b[i];
    }
}
