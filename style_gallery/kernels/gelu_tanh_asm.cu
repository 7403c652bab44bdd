// GELU (tanh approximation) over float4s with a grid-stride loop; tanh comes from the hardware
// approximation through inline PTX (tanh.approx.f32, sm_75+).
__device__ __forceinline__ float tanh_fast(float x)
{
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float gelu(float x)
{
    const float k0 = 0.7978845608f, k1 = 0.044715f;
    return 0.5f * x * (1.f + tanh_fast(k0 * (x + k1 * x * x * x)));
}

__global__ void gelu_f4(const float4* __restrict__ in, float4* __restrict__ out, size_t n4)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = in[i];
        v.x = gelu(v.x); v.y = gelu(v.y); v.z = gelu(v.z); v.w = gelu(v.w);
        out[i] = v;
    }
}
