// Single-query decode attention over a KV cache in fp16: each warp scores one key per lane step
// with __half2 dot products, keeps (max, sum) with a ternary rescale, merges the pairs across the
// warp, and accumulates the value rows.
#include <cuda_fp16.h>

template <int HEAD_DIM>
__global__ void decode_attention(const __half2* __restrict__ q, const __half2* __restrict__ kcache,
                                 const __half2* __restrict__ vcache, float* __restrict__ out, int seq_len, float scale)
{
    constexpr int H2 = HEAD_DIM / 2;
    const int lane = threadIdx.x;      // one warp per (batch, head)
    const size_t head = blockIdx.x;
    const __half2* qh = q + head * H2;
    const __half2* kh = kcache + head * (size_t)seq_len * H2;
    const __half2* vh = vcache + head * (size_t)seq_len * H2;

    float m = -1e30f, s = 0.f;
    float acc[HEAD_DIM / 32] = {};
    for (int t = lane; t < seq_len; t += 32) {
        __half2 dot2 = __float2half2_rn(0.f);
        for (int j = 0; j < H2; ++j) dot2 = __hfma2(qh[j], kh[(size_t)t * H2 + j], dot2);
        float score = (__low2float(dot2) + __high2float(dot2)) * scale;
        float m_new = score > m ? score : m;
        float alpha = __expf(m - m_new), p = __expf(score - m_new);
        s = s * alpha + p;
        for (int c = 0; c < HEAD_DIM / 32; ++c) {
            const __half* vrow = reinterpret_cast<const __half*>(vh + (size_t)t * H2);
            acc[c] = acc[c] * alpha + p * __half2float(vrow[c * 32 + lane]);
        }
        m = m_new;
    }
    for (int o = 16; o > 0; o /= 2) {
        float mo = __shfl_xor_sync(0xffffffff, m, o);
        float so = __shfl_xor_sync(0xffffffff, s, o);
        float mn = fmaxf(m, mo);
        float a = __expf(m - mn), b = __expf(mo - mn);
        s = s * a + so * b;
        for (int c = 0; c < HEAD_DIM / 32; ++c) {
            float ao = __shfl_xor_sync(0xffffffff, acc[c], o);
            acc[c] = acc[c] * a + ao * b;
        }
        m = mn;
    }
    for (int c = 0; c < HEAD_DIM / 32; ++c)
        out[head * HEAD_DIM + c * 32 + lane] = acc[c] / s;
}

template __global__ void decode_attention<128>(const __half2*, const __half2*, const __half2*, float*, int, float);
