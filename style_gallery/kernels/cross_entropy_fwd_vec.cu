// Cross-entropy loss per row: VEC-wide loads (a template parameter without default), a running
// max/sum per thread in the standard fmaxf form, warp merges of the pair, and __logf for the
// final log-sum-exp.
template <int VEC>
struct alignas(sizeof(float) * VEC) Pack { float v[VEC]; };

template <int VEC>
__global__ void xent_fwd(const float* __restrict__ logits, const int* __restrict__ target,
                         float* __restrict__ loss, int vocab)
{
    const Pack<VEC>* row = reinterpret_cast<const Pack<VEC>*>(logits + (size_t)blockIdx.x * vocab);
    float m = -INFINITY, s = 0.f;
    for (int i = threadIdx.x; i < vocab / VEC; i += 32) {
        Pack<VEC> p = row[i];
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            float mn = fmaxf(m, p.v[k]);
            s = s * expf(m - mn) + expf(p.v[k] - mn);
            m = mn;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float mo = __shfl_xor_sync(0xffffffff, m, o), so = __shfl_xor_sync(0xffffffff, s, o);
        float mn = fmaxf(m, mo);
        s = s * expf(m - mn) + so * expf(mo - mn);
        m = mn;
    }
    if (threadIdx.x == 0) {
        const float* lr = logits + (size_t)blockIdx.x * vocab;
        loss[blockIdx.x] = m + __logf(s) - lr[target[blockIdx.x]];
    }
}

template __global__ void xent_fwd<4>(const float*, const int*, float*, int);
