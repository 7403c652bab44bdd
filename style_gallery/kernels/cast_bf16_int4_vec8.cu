// bf16 -> fp32 conversion: 8 bf16 values per 16-byte int4 load, unrolled over the pack, written as
// two float4 stores; a size_t grid-stride loop covers any length.
#include <cuda_bf16.h>

__global__ void bf16_to_f32(const int4* __restrict__ src, float4* __restrict__ dst, size_t n8)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += (size_t)blockDim.x * gridDim.x) {
        int4 raw = src[i];
        const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(&raw);
        float f[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) f[j] = __bfloat162float(h[j]);
        dst[2 * i] = make_float4(f[0], f[1], f[2], f[3]);
        dst[2 * i + 1] = make_float4(f[4], f[5], f[6], f[7]);
    }
}
