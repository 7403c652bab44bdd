// RMSNorm over bf16 rows, 8 values per 16-byte load (uint4 reinterpreted as four bf16 pairs),
// a butterfly warp sum in an unrolled loop, rsqrtf for the inverse norm, launch bounds through a
// project macro.
#include <cuda_bf16.h>

#define KERNEL_LAUNCH_BOUNDS(threads) __launch_bounds__(threads)
#define WARP_SIZE 32

__global__ KERNEL_LAUNCH_BOUNDS(WARP_SIZE) void rmsnorm_bf16(const __nv_bfloat16* __restrict__ x,
                                                   const __nv_bfloat16* __restrict__ w,
                                                   __nv_bfloat16* __restrict__ y, int hidden, float eps)
{
    const uint4* xv = reinterpret_cast<const uint4*>(x + (size_t)blockIdx.x * hidden);
    const uint4* wv = reinterpret_cast<const uint4*>(w);
    uint4* yv = reinterpret_cast<uint4*>(y + (size_t)blockIdx.x * hidden);
    const int n8 = hidden / 8;

    float ss = 0.f;
    for (int i = threadIdx.x; i < n8; i += WARP_SIZE) {
        uint4 raw = xv[i];
        const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&raw);
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
            float2 f = __bfloat1622float2(p[k]);
            ss += f.x * f.x + f.y * f.y;
        }
    }
    #pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1)
        ss += __shfl_xor_sync(0xffffffff, ss, o);
    const float inv = rsqrtf(ss / hidden + eps);

    for (int i = threadIdx.x; i < n8; i += WARP_SIZE) {
        uint4 raw = xv[i], wr = wv[i], res;
        const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&raw);
        const __nv_bfloat162* q = reinterpret_cast<const __nv_bfloat162*>(&wr);
        __nv_bfloat162* r = reinterpret_cast<__nv_bfloat162*>(&res);
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
            float2 a = __bfloat1622float2(p[k]), b = __bfloat1622float2(q[k]);
            r[k] = __floats2bfloat162_rn(a.x * inv * b.x, a.y * inv * b.y);
        }
        yv[i] = res;
    }
}
