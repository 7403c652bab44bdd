// SwiGLU activation, bf16: out = silu(gate) * up. Each thread handles ITEMS packed pairs
// (a template parameter without a default, fixed at the launch), reads them as __nv_bfloat162,
// and uses __expf in the sigmoid. Launch bounds take the block size template parameter.
#include <cuda_bf16.h>

template <int BLOCK, int ITEMS>
__global__ void __launch_bounds__(BLOCK) silu_mul(const __nv_bfloat162* __restrict__ gate,
                                                  const __nv_bfloat162* __restrict__ up,
                                                  __nv_bfloat162* __restrict__ out, int n2)
{
    const int base = blockIdx.x * BLOCK * ITEMS + threadIdx.x;
    __nv_bfloat162 g[ITEMS], u[ITEMS];
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        int i = base + it * BLOCK;
        if (i < n2) { g[it] = gate[i]; u[it] = up[i]; }
    }
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        int i = base + it * BLOCK;
        if (i >= n2) break;
        float2 gf = __bfloat1622float2(g[it]), uf = __bfloat1622float2(u[it]);
        gf.x = gf.x / (1.f + __expf(-gf.x)) * uf.x;
        gf.y = gf.y / (1.f + __expf(-gf.y)) * uf.y;
        out[i] = __floats2bfloat162_rn(gf.x, gf.y);
    }
}

void swiglu_bf16(const __nv_bfloat16* gate, const __nv_bfloat16* up, __nv_bfloat16* out, int n, cudaStream_t s)
{
    const int n2 = n / 2;
    silu_mul<256, 4><<<(n2 + 1023) / 1024, 256, 0, s>>>(reinterpret_cast<const __nv_bfloat162*>(gate),
                                                        reinterpret_cast<const __nv_bfloat162*>(up),
                                                        reinterpret_cast<__nv_bfloat162*>(out), n2);
}
