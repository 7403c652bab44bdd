// klineage-step: mechanism=vector_access
// Paired stores where the bases allow them: o as bf16 pairs (one 4-byte store per two outputs) and
// A and the final state as float2, taken by a second instantiation of the kernel when o is 16-byte
// and state 8-byte aligned; the other instantiation keeps scalar stores for misaligned bases.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

#define GDN_D 128        // head dim of q/k and v
#define GDN_C 64         // chunk length
#define GDN_VS 64        // value columns per CTA
#define GDN_THREADS 256  // 8 warps

namespace {

constexpr int kLdK = GDN_D + 8;   // bf16 row stride of 128-wide tiles (K, Q)
constexpr int kLdV = GDN_VS + 8;  // bf16 row stride of 64-wide tiles (V, T, P, R, U, state copy)
constexpr int kLdA = GDN_C + 4;   // fp32 row stride of A and T
constexpr int kTileK = GDN_C * kLdK * 2;  // bytes
constexpr int kTileV = GDN_C * kLdV * 2;
constexpr int kOffK = 0;                             // [2] K tiles
constexpr int kOffQ = kOffK + 2 * kTileK;            // [2] Q tiles
constexpr int kOffV = kOffQ + 2 * kTileK;            // [2] V slice tiles
constexpr int kOffG = kOffV + 2 * kTileV;            // [2][64] raw g
constexpr int kOffBeta = kOffG + 2 * GDN_C * 4;      // [2][64] beta
constexpr int kOffGc = kOffBeta + 2 * GDN_C * 4;     // [64] in-chunk cumulative g
constexpr int kOffA = kOffGc + GDN_C * 4;            // [64][kLdA] fp32 A
constexpr int kOffT = kOffA + GDN_C * kLdA * 4;      // [64][kLdA] fp32 T
constexpr int kOffM = kOffT + GDN_C * kLdA * 4;      // [3][16][16] fp32 solve scratch
constexpr int kOffTb = kOffM + 3 * 256 * 4;          // bf16 T
constexpr int kOffP = kOffTb + kTileV;               // bf16 P
constexpr int kOffR = kOffP + kTileV;                // bf16 R
constexpr int kOffU = kOffR + kTileV;                // bf16 U
constexpr int kOffUd = kOffU + kTileV;               // bf16 exp(G_last - G) U
constexpr int kOffS = kOffUd + kTileV;               // bf16 state copy [128][kLdV]
constexpr int kSmemBytes = kOffS + GDN_D * kLdV * 2;

// ---- ptx helpers begin ----
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// four 8x8 b16 matrices; lane l gives the address of row (l & 7) of matrix l / 8
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)) : "memory");
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)) : "memory");
}

// d += a (16x16, row) * b (16x8, col), bf16 in, fp32 accumulate
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }
// ---- ptx helpers end ----

// Stage chunk c (64 tokens from t0) of K, Q, the V slice, g and beta into buffer `buf`; rows past T
// are zeros. Plain loads of single elements.
__device__ __forceinline__ void load_chunk(unsigned char* smem, int buf, int t0, int T, const __nv_bfloat16* kb,
                                           const __nv_bfloat16* qb, const __nv_bfloat16* vb, const float* gb,
                                           const float* bb, size_t qk_stride, size_t v_stride, int HV) {
    const int tid = threadIdx.x;
    __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem + kOffK + buf * kTileK);
    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem + kOffQ + buf * kTileK);
    __nv_bfloat16* sV = reinterpret_cast<__nv_bfloat16*>(smem + kOffV + buf * kTileV);
    float* sg = reinterpret_cast<float*>(smem + kOffG) + buf * GDN_C;
    float* sb = reinterpret_cast<float*>(smem + kOffBeta) + buf * GDN_C;
#pragma unroll
    for (int it = 0; it < (GDN_C * GDN_D / 8) / GDN_THREADS; ++it) {  // 4: 64 rows x 16 segments
        const int i = tid + it * GDN_THREADS;
        const int row = i >> 4, seg = i & 15;
        const int t = t0 + row;
        const bool valid = t < T;
        const size_t off = (size_t)(valid ? t : 0) * qk_stride + seg * 8;
        unsigned short* dk = reinterpret_cast<unsigned short*>(sK + row * kLdK + seg * 8);
        unsigned short* dq = reinterpret_cast<unsigned short*>(sQ + row * kLdK + seg * 8);
        const unsigned short* sk16 = reinterpret_cast<const unsigned short*>(kb + off);
        const unsigned short* sq16 = reinterpret_cast<const unsigned short*>(qb + off);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            dk[e] = valid ? sk16[e] : (unsigned short)0;
            dq[e] = valid ? sq16[e] : (unsigned short)0;
        }
    }
#pragma unroll
    for (int it = 0; it < (GDN_C * GDN_VS / 8) / GDN_THREADS; ++it) {  // 2: 64 rows x 8 segments
        const int i = tid + it * GDN_THREADS;
        const int row = i >> 3, seg = i & 7;
        const int t = t0 + row;
        const bool valid = t < T;
        const size_t off = (size_t)(valid ? t : 0) * v_stride + seg * 8;
        unsigned short* dv = reinterpret_cast<unsigned short*>(sV + row * kLdV + seg * 8);
        const unsigned short* sv16 = reinterpret_cast<const unsigned short*>(vb + off);
#pragma unroll
        for (int e = 0; e < 8; ++e) dv[e] = valid ? sv16[e] : (unsigned short)0;
    }
    if (tid < 2 * GDN_C) {
        const int row = tid & (GDN_C - 1);
        const int t = t0 + row;
        const bool valid = t < T;
        const size_t off = (size_t)(valid ? t : 0) * HV;
        const float* src = tid < GDN_C ? gb + off : bb + off;
        float* dst = tid < GDN_C ? sg + row : sb + row;
        *dst = valid ? *src : 0.0f;
    }
}

template <bool kAligned>
__global__ void __launch_bounds__(GDN_THREADS, 1)
gdn_chunk_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                 const __nv_bfloat16* __restrict__ v, const float* __restrict__ g, const float* __restrict__ beta,
                 __nv_bfloat16* __restrict__ o, float* __restrict__ state, int T, int H, int HV) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int g8 = lane >> 2, t4 = lane & 3;  // mma fragment row / column-pair of this lane
    const int slice = blockIdx.x, hv = blockIdx.y, b = blockIdx.z;
    const int h = hv / (HV / H);
    const int v0 = slice * GDN_VS;
    const int nc = (T + GDN_C - 1) / GDN_C;
    const float scale = rsqrtf((float)GDN_D);

    const size_t qk_stride = (size_t)H * GDN_D;  // elements from one token to the next
    const size_t v_stride = (size_t)HV * GDN_D;
    const __nv_bfloat16* qb = q + ((size_t)b * T * H + h) * GDN_D;
    const __nv_bfloat16* kb = k + ((size_t)b * T * H + h) * GDN_D;
    const __nv_bfloat16* vb = v + ((size_t)b * T * HV + hv) * GDN_D + v0;
    __nv_bfloat16* ob = o + ((size_t)b * T * HV + hv) * GDN_D + v0;
    const float* gb = g + (size_t)b * T * HV + hv;
    const float* bb = beta + (size_t)b * T * HV + hv;

    float* sGc = reinterpret_cast<float*>(smem + kOffGc);
    float* sA = reinterpret_cast<float*>(smem + kOffA);
    float* sT = reinterpret_cast<float*>(smem + kOffT);
    float* sM = reinterpret_cast<float*>(smem + kOffM);
    __nv_bfloat16* sTb = reinterpret_cast<__nv_bfloat16*>(smem + kOffTb);
    __nv_bfloat16* sP = reinterpret_cast<__nv_bfloat16*>(smem + kOffP);
    __nv_bfloat16* sR = reinterpret_cast<__nv_bfloat16*>(smem + kOffR);
    __nv_bfloat16* sU = reinterpret_cast<__nv_bfloat16*>(smem + kOffU);
    __nv_bfloat16* sUd = reinterpret_cast<__nv_bfloat16*>(smem + kOffUd);
    __nv_bfloat16* sS = reinterpret_cast<__nv_bfloat16*>(smem + kOffS);

    // state slice: warp w owns rows 16w + g8 (+8), columns 8 nt + 2 t4 (+1)
    float sacc[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) sacc[nt][e] = 0.0f;
    {  // zero the bf16 state copy and the bf16 T and P tiles (their upper blocks are never written)
        uint32_t* z = reinterpret_cast<uint32_t*>(smem + kOffTb);
        for (int i = tid; i < (kOffS + GDN_D * kLdV * 2 - kOffTb) / 4; i += GDN_THREADS) z[i] = 0u;
    }

    const int m = warp & 3;           // 16-row strip of K S0 / Q S0 / T R / P U
    const int nb = (warp >> 2) * 32;  // its 32 value columns
    const int sm = warp < 4 ? warp : 7 - warp;  // strip of K K^T (warps 0-3) or Q K^T (warps 4-7)

    for (int c = 0; c < nc; ++c) {
        const int buf = c & 1;
        load_chunk(smem, buf, c * GDN_C, T, kb, qb, vb, gb, bb, qk_stride, v_stride, HV);
        __syncthreads();  // chunk c staged (its buffer was last read two chunks ago)
        const __nv_bfloat16* cK = reinterpret_cast<const __nv_bfloat16*>(smem + kOffK + buf * kTileK);
        const __nv_bfloat16* cQ = reinterpret_cast<const __nv_bfloat16*>(smem + kOffQ + buf * kTileK);
        const __nv_bfloat16* cV = reinterpret_cast<const __nv_bfloat16*>(smem + kOffV + buf * kTileV);
        const float* cg = reinterpret_cast<const float*>(smem + kOffG) + buf * GDN_C;
        const float* cb = reinterpret_cast<const float*>(smem + kOffBeta) + buf * GDN_C;

        // ---- phase A: in-chunk cumulative decay; X = K S0, Y = Q S0 (strip m, 32 columns); K K^T or Q K^T
        if (warp == 0) {
            const float g0 = cg[2 * lane], g1 = cg[2 * lane + 1];
            float s = g0 + g1;
#pragma unroll
            for (int off = 1; off < 32; off <<= 1) {
                const float n = __shfl_up_sync(0xffffffffu, s, off);
                if (lane >= off) s += n;
            }
            sGc[2 * lane] = s - g1;
            sGc[2 * lane + 1] = s;
        }
        float xacc[4][4], yacc[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) xacc[nt][e] = yacc[nt][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < GDN_D / 16; ++ks) {
            uint32_t ak[4], aq[4];
            ldsm_x4(ak, cK + (16 * m + (lane & 15)) * kLdK + ks * 16 + (lane >> 4) * 8);
            ldsm_x4(aq, cQ + (16 * m + (lane & 15)) * kLdK + ks * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int np = 0; np < 2; ++np) {
                uint32_t bs[4];
                ldsm_x4_t(bs, sS + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLdV + nb + np * 16 + (lane >> 4) * 8);
                mma_bf16(xacc[2 * np], ak, bs[0], bs[1]);
                mma_bf16(xacc[2 * np + 1], ak, bs[2], bs[3]);
                mma_bf16(yacc[2 * np], aq, bs[0], bs[1]);
                mma_bf16(yacc[2 * np + 1], aq, bs[2], bs[3]);
            }
        }
        float sc[8][4];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) sc[nt][e] = 0.0f;
        {
            const __nv_bfloat16* aSrc = warp < 4 ? cK : cQ;
#pragma unroll
            for (int ks = 0; ks < GDN_D / 16; ++ks) {
                uint32_t a[4];
                ldsm_x4(a, aSrc + (16 * sm + (lane & 15)) * kLdK + ks * 16 + (lane >> 4) * 8);
#pragma unroll
                for (int np = 0; np < 4; ++np) {
                    if (np <= sm) {
                        uint32_t bk[4];
                        ldsm_x4(bk, cK + (np * 16 + (lane & 7) + (lane >> 4) * 8) * kLdK + ks * 16 + ((lane >> 3) & 1) * 8);
                        mma_bf16(sc[2 * np], a, bk[0], bk[1]);
                        mma_bf16(sc[2 * np + 1], a, bk[2], bk[3]);
                    }
                }
            }
        }
        __syncthreads();  // sGc visible

        // ---- phase B: R = beta (V - exp(G) X) -> bf16; A (fp32) or P (bf16) with their decay factors
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int i = 16 * m + g8 + 8 * hh;
            const float bi = cb[i];
            const float fi = bi * __expf(sGc[i]);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const int col = nb + 8 * nt + 2 * t4;
                const uint32_t vv = *reinterpret_cast<const uint32_t*>(cV + i * kLdV + col);
                *reinterpret_cast<uint32_t*>(sR + i * kLdV + col) =
                    pack_bf16(bi * bf16_lo(vv) - fi * xacc[nt][2 * hh], bi * bf16_hi(vv) - fi * xacc[nt][2 * hh + 1]);
            }
        }
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int i = 16 * sm + g8 + 8 * hh;
            const float gi = sGc[i];
            const float bi = cb[i];
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                if (nt < 2 * (sm + 1)) {
                    const int j = 8 * nt + 2 * t4;
                    if (warp < 4) {  // A: strictly lower
                        const float e0 = j < i ? bi * __expf(gi - sGc[j]) : 0.0f;
                        const float e1 = j + 1 < i ? bi * __expf(gi - sGc[j + 1]) : 0.0f;
                        *reinterpret_cast<float2*>(sA + i * kLdA + j) = make_float2(e0 * sc[nt][2 * hh], e1 * sc[nt][2 * hh + 1]);
                    } else {  // P: lower with the diagonal
                        const float e0 = j <= i ? __expf(gi - sGc[j]) : 0.0f;
                        const float e1 = j + 1 <= i ? __expf(gi - sGc[j + 1]) : 0.0f;
                        *reinterpret_cast<uint32_t*>(sP + i * kLdV + j) = pack_bf16(e0 * sc[nt][2 * hh], e1 * sc[nt][2 * hh + 1]);
                    }
                }
            }
        }
        __syncthreads();  // A, P, R visible

        // ---- phase C: T = (I + A)^-1. Diagonal 16x16 blocks: thread (block, column) substitutes down.
        if (tid < 64) {
            const int blk = tid >> 4, cc = tid & 15;
            const float* a = sA + 16 * blk * kLdA + 16 * blk;
            float x[16];
#pragma unroll
            for (int r = 0; r < 16; ++r) x[r] = r == cc ? 1.0f : 0.0f;
#pragma unroll
            for (int jj = 0; jj < 16; ++jj)
#pragma unroll
                for (int r = jj + 1; r < 16; ++r) x[r] -= a[r * kLdA + jj] * x[jj];
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                sT[(16 * blk + r) * kLdA + 16 * blk + cc] = x[r];
                sTb[(16 * blk + r) * kLdV + 16 * blk + cc] = __float2bfloat16(x[r]);
            }
        }
        __syncthreads();
        // Off-diagonal blocks by distance d: T_ij = -T_ii sum_{k=j}^{i-1} A_ik T_kj, i = j + d.
        {
            const int r = tid >> 4, cc = tid & 15;
#pragma unroll
            for (int d = 1; d < 4; ++d) {
#pragma unroll
                for (int jb = 0; jb < 4 - d; ++jb) {
                    const int ib = jb + d;
                    float acc = 0.0f;
#pragma unroll
                    for (int kb2 = jb; kb2 < ib; ++kb2)
#pragma unroll
                        for (int qq = 0; qq < 16; ++qq)
                            acc += sA[(16 * ib + r) * kLdA + 16 * kb2 + qq] * sT[(16 * kb2 + qq) * kLdA + 16 * jb + cc];
                    sM[jb * 256 + r * 16 + cc] = acc;
                }
                __syncthreads();
#pragma unroll
                for (int jb = 0; jb < 4 - d; ++jb) {
                    const int ib = jb + d;
                    float acc = 0.0f;
#pragma unroll
                    for (int qq = 0; qq < 16; ++qq)
                        acc += sT[(16 * ib + r) * kLdA + 16 * ib + qq] * sM[jb * 256 + qq * 16 + cc];
                    sT[(16 * ib + r) * kLdA + 16 * jb + cc] = -acc;
                    sTb[(16 * ib + r) * kLdV + 16 * jb + cc] = __float2bfloat16(-acc);
                }
                __syncthreads();
            }
        }

        // ---- phase D: U = T R (strip m, 32 columns; T's strip is zero past its diagonal block)
        const float glast = sGc[GDN_C - 1];
        {
            float uacc[4][4];
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) uacc[nt][e] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) {
                if (ks <= m) {
                    uint32_t a[4];
                    ldsm_x4(a, sTb + (16 * m + (lane & 15)) * kLdV + ks * 16 + (lane >> 4) * 8);
#pragma unroll
                    for (int np = 0; np < 2; ++np) {
                        uint32_t br[4];
                        ldsm_x4_t(br, sR + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLdV + nb + np * 16 + (lane >> 4) * 8);
                        mma_bf16(uacc[2 * np], a, br[0], br[1]);
                        mma_bf16(uacc[2 * np + 1], a, br[2], br[3]);
                    }
                }
            }
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int i = 16 * m + g8 + 8 * hh;
                const float fd = __expf(glast - sGc[i]);
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) {
                    const int col = nb + 8 * nt + 2 * t4;
                    const float u0 = uacc[nt][2 * hh], u1 = uacc[nt][2 * hh + 1];
                    *reinterpret_cast<uint32_t*>(sU + i * kLdV + col) = pack_bf16(u0, u1);
                    *reinterpret_cast<uint32_t*>(sUd + i * kLdV + col) = pack_bf16(fd * u0, fd * u1);
                }
            }
        }
        __syncthreads();  // U visible

        // ---- phase E: O = scale (exp(G) Y + P U) for strip m; S = exp(G_last) S + K^T Ud
        {
            float oacc[4][4];
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) oacc[nt][e] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) {
                if (ks <= m) {
                    uint32_t a[4];
                    ldsm_x4(a, sP + (16 * m + (lane & 15)) * kLdV + ks * 16 + (lane >> 4) * 8);
#pragma unroll
                    for (int np = 0; np < 2; ++np) {
                        uint32_t bu[4];
                        ldsm_x4_t(bu, sU + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLdV + nb + np * 16 + (lane >> 4) * 8);
                        mma_bf16(oacc[2 * np], a, bu[0], bu[1]);
                        mma_bf16(oacc[2 * np + 1], a, bu[2], bu[3]);
                    }
                }
            }
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int i = 16 * m + g8 + 8 * hh;
                const int t = c * GDN_C + i;
                const float fi = __expf(sGc[i]);
                if (t < T) {
                    __nv_bfloat16* orow = ob + (size_t)t * v_stride;
#pragma unroll
                    for (int nt = 0; nt < 4; ++nt) {
                        const int col = nb + 8 * nt + 2 * t4;
                        const float o0 = scale * (fi * yacc[nt][2 * hh] + oacc[nt][2 * hh]);
                        const float o1 = scale * (fi * yacc[nt][2 * hh + 1] + oacc[nt][2 * hh + 1]);
                        if (kAligned) {
                            *reinterpret_cast<uint32_t*>(orow + col) = pack_bf16(o0, o1);
                        } else {
                            orow[col] = __float2bfloat16(o0);
                            orow[col + 1] = __float2bfloat16(o1);
                        }
                    }
                }
            }
        }
        {
            const float gl = __expf(glast);
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) sacc[nt][e] *= gl;
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) {
                uint32_t a[4];  // K^T rows 16 warp.., tokens 16 ks..: K tile read transposed
                ldsm_x4_t(a, cK + (ks * 16 + (lane & 7) + ((lane >> 4) & 1) * 8) * kLdK + 16 * warp + ((lane >> 3) & 1) * 8);
#pragma unroll
                for (int np = 0; np < 4; ++np) {
                    uint32_t bu[4];
                    ldsm_x4_t(bu, sUd + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLdV + np * 16 + (lane >> 4) * 8);
                    mma_bf16(sacc[2 * np], a, bu[0], bu[1]);
                    mma_bf16(sacc[2 * np + 1], a, bu[2], bu[3]);
                }
            }
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int r = 16 * warp + g8 + 8 * hh;
#pragma unroll
                for (int nt = 0; nt < 8; ++nt)
                    *reinterpret_cast<uint32_t*>(sS + r * kLdV + 8 * nt + 2 * t4) =
                        pack_bf16(sacc[nt][2 * hh], sacc[nt][2 * hh + 1]);
            }
        }
    }

    float* st = state + ((size_t)b * HV + hv) * GDN_D * GDN_D + v0;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int r = 16 * warp + g8 + 8 * hh;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            float* p = st + (size_t)r * GDN_D + 8 * nt + 2 * t4;
            if (kAligned) {
                *reinterpret_cast<float2*>(p) = make_float2(sacc[nt][2 * hh], sacc[nt][2 * hh + 1]);
            } else {
                p[0] = sacc[nt][2 * hh];
                p[1] = sacc[nt][2 * hh + 1];
            }
        }
    }
}

}  // namespace

extern "C" cudaError_t gdn(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const float* g,
                           const float* beta, __nv_bfloat16* o, float* state, int B, int T, int H, int HV,
                           cudaStream_t stream) {
    if (B <= 0 || H <= 0 || HV <= 0 || HV % H != 0 || T < 0) return cudaErrorInvalidValue;
    if (B > 65535 || HV > 65535) return cudaErrorInvalidValue;
    const bool aligned = ((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) |
                           reinterpret_cast<uintptr_t>(v) | reinterpret_cast<uintptr_t>(o)) & 15) == 0 &&
                         (reinterpret_cast<uintptr_t>(state) & 7) == 0;
    dim3 grid(GDN_D / GDN_VS, HV, B);
    if (aligned) {
        cudaError_t err = cudaFuncSetAttribute(gdn_chunk_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               kSmemBytes);
        if (err != cudaSuccess) return err;
        gdn_chunk_kernel<true><<<grid, GDN_THREADS, kSmemBytes, stream>>>(q, k, v, g, beta, o, state, T, H, HV);
    } else {
        cudaError_t err = cudaFuncSetAttribute(gdn_chunk_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               kSmemBytes);
        if (err != cudaSuccess) return err;
        gdn_chunk_kernel<false><<<grid, GDN_THREADS, kSmemBytes, stream>>>(q, k, v, g, beta, o, state, T, H, HV);
    }
    return cudaGetLastError();
}
