// FlashAttention-2 style forward for head dim 64 in fp16: each warp owns 16 query rows, S = Q K^T
// and O += P V run on mma.sync m16n8k16 (inline PTX), K/V tiles of 64 keys are double-buffered in
// shared memory with __pipeline_memcpy_async, and the softmax uses exp2f on log2e-scaled scores
// with row statistics combined across the 4 lanes of a quad.
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <stdint.h>

#define HD 64
#define KT 64

__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack(float lo, float hi)
{
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}

__global__ void fmha_fwd(const half* __restrict__ Q, const half* __restrict__ K, const half* __restrict__ V,
                         half* __restrict__ O, int seq, float scale_log2)
{
    __shared__ __align__(16) half sK[2][KT * HD];
    __shared__ __align__(16) half sV[2][KT * HD];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int gid = lane / 4, tig = lane % 4;
    const size_t bh = blockIdx.y;
    const half* q = Q + (bh * seq + blockIdx.x * 64 + warp * 16) * HD;
    const half* k = K + bh * seq * HD;
    const half* v = V + bh * seq * HD;

    uint32_t qf[HD / 16][4];
    for (int kk = 0; kk < HD / 16; ++kk) {
        const half* r0 = q + gid * HD + kk * 16 + tig * 2;
        const half* r1 = r0 + 8 * HD;
        qf[kk][0] = *reinterpret_cast<const uint32_t*>(r0);
        qf[kk][1] = *reinterpret_cast<const uint32_t*>(r1);
        qf[kk][2] = *reinterpret_cast<const uint32_t*>(r0 + 8);
        qf[kk][3] = *reinterpret_cast<const uint32_t*>(r1 + 8);
    }

    float o_acc[HD / 8][4] = {};
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

    auto prefetch = [&](int buf, int t0) {
        for (int c = threadIdx.x; c < KT * HD / 8; c += blockDim.x) {
            __pipeline_memcpy_async(&sK[buf][c * 8], k + (size_t)t0 * HD + c * 8, 16);
            __pipeline_memcpy_async(&sV[buf][c * 8], v + (size_t)t0 * HD + c * 8, 16);
        }
        __pipeline_commit();
    };
    prefetch(0, 0);
    const int ntiles = seq / KT;
    for (int t = 0; t < ntiles; ++t) {
        const int cur = t & 1;
        if (t + 1 < ntiles) prefetch(cur ^ 1, (t + 1) * KT);
        __pipeline_wait_prior(t + 1 < ntiles ? 1 : 0);
        __syncthreads();

        float s[KT / 8][4] = {};
        for (int n = 0; n < KT / 8; ++n)
            for (int kk = 0; kk < HD / 16; ++kk) {
                const half* kr = &sK[cur][(n * 8 + gid) * HD + kk * 16 + tig * 2];
                mma_f16(s[n], qf[kk], *reinterpret_cast<const uint32_t*>(kr), *reinterpret_cast<const uint32_t*>(kr + 8));
            }
        for (int h = 0; h < 2; ++h) {
            float mx = row_max[h];
            for (int n = 0; n < KT / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * h], s[n][2 * h + 1]) * scale_log2);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
            const float corr = exp2f(row_max[h] - mx);
            float ps = 0.f;
            for (int n = 0; n < KT / 8; ++n) {
                s[n][2 * h] = exp2f(s[n][2 * h] * scale_log2 - mx);
                s[n][2 * h + 1] = exp2f(s[n][2 * h + 1] * scale_log2 - mx);
                ps += s[n][2 * h] + s[n][2 * h + 1];
            }
            ps += __shfl_xor_sync(0xffffffff, ps, 1);
            ps += __shfl_xor_sync(0xffffffff, ps, 2);
            row_sum[h] = row_sum[h] * corr + ps;
            row_max[h] = mx;
            for (int d = 0; d < HD / 8; ++d) { o_acc[d][2 * h] *= corr; o_acc[d][2 * h + 1] *= corr; }
        }
        for (int kk = 0; kk < KT / 16; ++kk) {
            uint32_t pf[4] = {pack(s[2 * kk][0], s[2 * kk][1]), pack(s[2 * kk][2], s[2 * kk][3]),
                              pack(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            for (int d = 0; d < HD / 8; ++d) {
                const half* vr = &sV[cur][(kk * 16 + tig * 2) * HD + d * 8 + gid];
                uint32_t b0 = pack(__half2float(vr[0]), __half2float(vr[HD]));
                uint32_t b1 = pack(__half2float(vr[8 * HD]), __half2float(vr[9 * HD]));
                mma_f16(o_acc[d], pf, b0, b1);
            }
        }
        __syncthreads();
    }
    half* out = O + (bh * seq + blockIdx.x * 64 + warp * 16) * HD;
    for (int d = 0; d < HD / 8; ++d)
        for (int h = 0; h < 2; ++h) {
            half2 val = __floats2half2_rn(o_acc[d][2 * h] / row_sum[h], o_acc[d][2 * h + 1] / row_sum[h]);
            *reinterpret_cast<half2*>(&out[(gid + 8 * h) * HD + d * 8 + tig * 2]) = val;
        }
}
