// A codebase that spells its kernel qualifiers through one macro (KERNEL_256 = __global__ plus
// launch bounds): a scaled residual add with float4 accesses and a per-row norm through shuffles.
#define KERNEL_256 __global__ __launch_bounds__(256)

KERNEL_256 void scaled_residual(const float4* __restrict__ x, const float4* __restrict__ r, float4* __restrict__ y,
                                float* __restrict__ row_norm, int n4_per_row)
{
    const float4* xr = x + (size_t)blockIdx.x * n4_per_row;
    const float4* rr = r + (size_t)blockIdx.x * n4_per_row;
    float4* yr = y + (size_t)blockIdx.x * n4_per_row;
    float ss = 0.f;
    for (int i = threadIdx.x; i < n4_per_row; i += blockDim.x) {
        float4 a = xr[i], b = rr[i];
        float4 o = make_float4(a.x + 0.5f * b.x, a.y + 0.5f * b.y, a.z + 0.5f * b.z, a.w + 0.5f * b.w);
        yr[i] = o;
        ss += o.x * o.x + o.y * o.y + o.z * o.z + o.w * o.w;
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(&row_norm[blockIdx.x], ss);
}
