// Fused Adam step: grid-stride over float4 slots, gradients read once with evict-first loads
// (__ldcs), the update uses __fdividef, parameters and moments written back in place.
__global__ void adam_step(float4* __restrict__ param, const float4* __restrict__ grad, float4* __restrict__ m,
                          float4* __restrict__ v, int n4, float lr, float b1, float b2, float eps, float c1, float c2)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += blockDim.x * gridDim.x) {
        float4 g = __ldcs(grad + i);
        float4 mm = m[i], vv = v[i], p = param[i];
        float gs[4] = {g.x, g.y, g.z, g.w};
        float ms[4] = {mm.x, mm.y, mm.z, mm.w};
        float vs[4] = {vv.x, vv.y, vv.z, vv.w};
        float ps[4] = {p.x, p.y, p.z, p.w};
        for (int k = 0; k < 4; ++k) {
            ms[k] = b1 * ms[k] + (1.f - b1) * gs[k];
            vs[k] = b2 * vs[k] + (1.f - b2) * gs[k] * gs[k];
            ps[k] -= lr * __fdividef(ms[k] * c1, sqrtf(vs[k] * c2) + eps);
        }
        m[i] = make_float4(ms[0], ms[1], ms[2], ms[3]);
        v[i] = make_float4(vs[0], vs[1], vs[2], vs[3]);
        param[i] = make_float4(ps[0], ps[1], ps[2], ps[3]);
    }
}
