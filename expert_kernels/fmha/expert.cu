// fmha expert for the H200: out = softmax(q k^T / sqrt(D)) v over [B, H, S, D] fp16 tensors, D = 128,
// non-causal, fp32 softmax statistics and accumulation.
//
// Mechanisms, outermost first:
// - tensor-core warpgroup MMA (wgmma.mma_async, sm_90a): s = q k^T as m64n128k16 with both operands
//   in shared memory; o += p v as m64n128k16 with p taken from registers (the s accumulator,
//   rounded to fp16 in place: its fragment layout is the A-operand layout) and v read transposed
//   (MN-major) from shared memory;
// - online softmax: a running row maximum and row sum in registers, the output rescaled when the
//   maximum grows, exponentials as ex2 of log2(e)-scaled scores;
// - bulk tensor copies (TMA, 3D tensor maps over [B*H, S, D]) of 128-row q, k and v tiles in two
//   64-column halves with a 128-byte swizzle, completing on mbarriers with transaction counts;
//   rows past S arrive as zeros and their scores are masked;
// - a ring of FMHA_STAGES k/v stages with separate k and v barriers, so s = q k^T starts before
//   v has landed;
// - warp specialization: warpgroup 0 drives the copy engine (setmaxnreg gives its registers
//   away), warpgroups 1..2 compute, each owning 64 query rows of the 128-row tile.
//
// The fast path needs D = 128, 16-byte aligned q, k, v (the tensor-map rules) and a 4-byte aligned
// out (half2 stores); any other call
// takes a plain fallback kernel, so every shape is computed, only the fast path is fast.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda.h>
#include <stdint.h>

#ifndef FMHA_STAGES
#define FMHA_STAGES 2  // k/v stages in the copy ring (64 KB each)
#endif

#ifndef FMHA_OVERLAP
#define FMHA_OVERLAP 0  // 1: the next tile's q k^T and this tile's p v overlap the softmax (measured slower: 0.745x against 0.774x)
#endif

#define FMHA_BM 128  // query rows per block (64 per consumer warpgroup)
#define FMHA_BN 128  // key rows per tile
#define FMHA_D 128

namespace {

constexpr int kConsumers = FMHA_BM / 64;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr int kTileQ = FMHA_BM * FMHA_D;  // elements
constexpr int kTileKV = FMHA_BN * FMHA_D;
constexpr int kSmemBytes = (kTileQ + 2 * FMHA_STAGES * kTileKV) * 2 + (1 + 3 * FMHA_STAGES) * 8 + 1024;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n}\n" :: "r"(smem_addr(bar)), "r"(parity) : "memory");
}

// A box of 64 columns x 128 rows of one head (c0 along D, c1 along S, c2 the head) into shared
// memory, counted in bytes on `bar`. Rows past S arrive as zeros.
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
        :: "r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
        : "memory");
}

// Descriptor of a K-major operand tile with 128-byte swizzle: rows of 64 halves (128 bytes), groups
// of 8 rows 1024 bytes apart. Base 1024-byte aligned (plus the 32-byte step along K inside a row).
__device__ __forceinline__ uint64_t desc_kmajor(const void* p) {
    uint64_t a = smem_addr(p);
    return ((a & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

// Descriptor of v read as an MN-major B operand (the reduction runs over key rows, v's outer
// dimension): each key row holds 64 halves of D (128 bytes, swizzled), 8 key rows form a 1024-byte
// atom; atoms along D (the two 64-column halves) are `half_bytes` apart (leading byte offset), atoms
// along the keys 1024 bytes apart (stride byte offset).
__device__ __forceinline__ uint64_t desc_mnmajor(const void* p, uint32_t half_bytes) {
    uint64_t a = smem_addr(p);
    return ((a & 0x3FFFF) >> 4) | ((uint64_t)((half_bytes >> 4) & 0x3FFF) << 16) | ((1024ull >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }

template <int R>
__device__ __forceinline__ void fence_regs(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

template <int R>
__device__ __forceinline__ void fence_regs(uint32_t (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+r"(d[i]) :: "memory");
}

#define FMHA_D64(d)                                                                                              \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
    "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),        \
    "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),      \
    "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),      \
    "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),      \
    "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),      \
    "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),      \
    "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

#define FMHA_REGS64                                                                                      \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
    "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "   \
    "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "   \
    "%62, %63}"

// D[64 x 128] (+)= A[64 x 16] * B[16 x 128], both from shared memory (K-major); scale_d = 0 overwrites.
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " FMHA_REGS64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
        : FMHA_D64(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// D[64 x 128] += A[64 x 16] * B[16 x 128]: A from registers (4 x f16x2 per thread), B transposed
// (MN-major) from shared memory.
__device__ __forceinline__ void wgmma_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " FMHA_REGS64
        ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : FMHA_D64(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}

__global__ void __launch_bounds__(kThreads, 1)
fmha_wgmma_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
                  const __grid_constant__ CUtensorMap tmap_v, __half* __restrict__ out, int S, float scale_log2) {
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    __half* sQ = reinterpret_cast<__half*>(smem);            // [2 halves][128 rows][64]
    __half* sK = sQ + kTileQ;                                  // [stage][2 halves][128 rows][64]
    __half* sV = sK + FMHA_STAGES * kTileKV;
    uint64_t* bar_q = reinterpret_cast<uint64_t*>(sV + FMHA_STAGES * kTileKV);
    uint64_t* full_k = bar_q + 1;
    uint64_t* full_v = full_k + FMHA_STAGES;
    uint64_t* empty = full_v + FMHA_STAGES;

    const int bh = blockIdx.y;
    const int q0 = blockIdx.x * FMHA_BM;
    const int ntiles = (S + FMHA_BN - 1) / FMHA_BN;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;

    if (threadIdx.x == 0) {
        mbar_init(bar_q, 1);
        for (int s = 0; s < FMHA_STAGES; ++s) {
            mbar_init(&full_k[s], 1);
            mbar_init(&full_v[s], 1);
            mbar_init(&empty[s], kConsumers * 4);  // one arrival per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
        if (tid == 0) {
            constexpr uint32_t half_q = FMHA_BM * 64, half_kv = FMHA_BN * 64;
            mbar_expect_tx(bar_q, kTileQ * 2);
            tma_load_3d(sQ, &tmap_q, 0, q0, bh, bar_q);
            tma_load_3d(sQ + half_q, &tmap_q, 64, q0, bh, bar_q);
            for (int j = 0; j < ntiles; ++j) {
                const int s = j % FMHA_STAGES;
                if (j >= FMHA_STAGES) mbar_wait(&empty[s], ((j / FMHA_STAGES) - 1) & 1);
                __half* k = sK + s * kTileKV;
                __half* v = sV + s * kTileKV;
                mbar_expect_tx(&full_k[s], kTileKV * 2);
                tma_load_3d(k, &tmap_k, 0, j * FMHA_BN, bh, &full_k[s]);
                tma_load_3d(k + half_kv, &tmap_k, 64, j * FMHA_BN, bh, &full_k[s]);
                mbar_expect_tx(&full_v[s], kTileKV * 2);
                tma_load_3d(v, &tmap_v, 0, j * FMHA_BN, bh, &full_v[s]);
                tma_load_3d(v + half_kv, &tmap_v, 64, j * FMHA_BN, bh, &full_v[s]);
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
    const int c = wg - 1;
    const int warp = tid / 32, lane = tid % 32;
    float o[64], sacc[64];
    uint32_t p[32];  // the probabilities as fp16 pairs: the A operand of p v
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
    const __half* q_rows = sQ + c * 64 * 64;  // this warpgroup's 64 rows inside each half
    mbar_wait(bar_q, 0);

    // s = q k^T of key tile j into sacc (issued, not waited for)
    auto issue_s = [&](int j) {
        const int s = j % FMHA_STAGES;
        const __half* k = sK + s * kTileKV;
        mbar_wait(&full_k[s], (j / FMHA_STAGES) & 1);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < FMHA_D / 16; ++kk) {
            const int half = kk / 4, off = (kk % 4) * 16;
            wgmma_ss(sacc, desc_kmajor(q_rows + half * FMHA_BM * 64 + off),
                     desc_kmajor(k + half * FMHA_BN * 64 + off), kk > 0);
        }
        wgmma_commit();
    };
    // o += p v of key tile j (issued, not waited for)
    auto issue_pv = [&](int j) {
        const int s = j % FMHA_STAGES;
        const __half* v = sV + s * kTileKV;
        mbar_wait(&full_v[s], (j / FMHA_STAGES) & 1);
        wgmma_fence();
#pragma unroll
        for (int t = 0; t < FMHA_BN / 16; ++t) {
            // keys 16t .. 16t+15: accumulator column blocks 2t (a0, a1) and 2t + 1 (a2, a3)
            const uint32_t a[4] = {p[4 * t], p[4 * t + 1], p[4 * t + 2], p[4 * t + 3]};
            wgmma_rs(o, a, desc_mnmajor(v + t * 16 * 64, FMHA_BN * 128));
        }
        wgmma_commit();
    };
    // online softmax over key tile j, in place in sacc (rows lane/4 and lane/4 + 8 of the warp's
    // 16): sacc becomes the unnormalized probabilities; returns through corr the factor the
    // output accumulated so far must be scaled by
    auto softmax = [&](int j, float (&corr)[2]) {
        const int col0 = j * FMHA_BN + (lane % 4) * 2;
        const bool ragged = (j + 1) * FMHA_BN > S;
        float mx[2] = {m_run[0], m_run[1]};
#pragma unroll
        for (int t = 0; t < 16; ++t) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float x = sacc[4 * t + e] * scale_log2;
                if (ragged && col0 + t * 8 + (e & 1) >= S) x = -INFINITY;
                sacc[4 * t + e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        }
        float rs[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            corr[r] = ex2(m_run[r] - mx[r]);
            m_run[r] = mx[r];
        }
#pragma unroll
        for (int t = 0; t < 16; ++t) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                sacc[4 * t + e] = ex2(sacc[4 * t + e] - mx[e >> 1]);
                rs[e >> 1] += sacc[4 * t + e];
            }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * corr[r] + rs[r];
    };
    auto rescale_and_pack = [&](const float (&corr)[2]) {
#pragma unroll
        for (int t = 0; t < 16; ++t) {
            o[4 * t + 0] *= corr[0];
            o[4 * t + 1] *= corr[0];
            o[4 * t + 2] *= corr[1];
            o[4 * t + 3] *= corr[1];
            p[2 * t] = pack_half2(sacc[4 * t], sacc[4 * t + 1]);
            p[2 * t + 1] = pack_half2(sacc[4 * t + 2], sacc[4 * t + 3]);
        }
    };

    float corr[2];
#if FMHA_OVERLAP
    // The next tile's q k^T and this tile's p v are in flight together while the warpgroup works
    // out the next tile's softmax; p stays live (the fence) until the p v that reads it retires.
    issue_s(0);
    wgmma_wait<0>();
    fence_regs(sacc);
    softmax(0, corr);
    rescale_and_pack(corr);
    for (int j = 1; j < ntiles; ++j) {
        issue_s(j);
        issue_pv(j - 1);
        wgmma_wait<1>();
        fence_regs(sacc);
        softmax(j, corr);
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs(p);
        if (lane == 0) mbar_arrive(&empty[(j - 1) % FMHA_STAGES]);
        rescale_and_pack(corr);
    }
    issue_pv(ntiles - 1);
    wgmma_wait<0>();
    fence_regs(o);
    if (lane == 0) mbar_arrive(&empty[(ntiles - 1) % FMHA_STAGES]);
#else
    for (int j = 0; j < ntiles; ++j) {
        issue_s(j);
        wgmma_wait<0>();
        fence_regs(sacc);
        softmax(j, corr);
        rescale_and_pack(corr);
        issue_pv(j);
        wgmma_wait<0>();
        fence_regs(o);
        if (lane == 0) mbar_arrive(&empty[j % FMHA_STAGES]);
    }
#endif

    // finish: full row sums across the 4 lanes of a row, normalize, store rows < S
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
        l_run[r] = 1.0f / l_run[r];
    }
    const int row = q0 + c * 64 + warp * 16 + lane / 4;
    __half* base = out + (long long)bh * S * FMHA_D;
#pragma unroll
    for (int t = 0; t < 16; ++t) {
        const int col = t * 8 + (lane % 4) * 2;
        if (row < S)
            *reinterpret_cast<__half2*>(base + (long long)row * FMHA_D + col) =
                __floats2half2_rn(o[4 * t] * l_run[0], o[4 * t + 1] * l_run[0]);
        if (row + 8 < S)
            *reinterpret_cast<__half2*>(base + (long long)(row + 8) * FMHA_D + col) =
                __floats2half2_rn(o[4 * t + 2] * l_run[1], o[4 * t + 3] * l_run[1]);
    }
}

// Fallback for calls the copy engine cannot describe (D != 128, unaligned bases): one block of 128
// threads per query row; scores of 128 keys at a time in shared memory, online softmax, thread d
// accumulates output columns d and d + 128. Any S, any D <= 256, any alignment.
__global__ void __launch_bounds__(128)
fmha_fallback_kernel(const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
                     __half* __restrict__ out, int S, int D, float scale) {
    __shared__ float qs[256];
    __shared__ float ps[128];
    __shared__ float red[4];
    const int row = blockIdx.x, bh = blockIdx.y, t = threadIdx.x;
    const long long head = (long long)bh * S * D;
    for (int d = t; d < D; d += 128) qs[d] = __half2float(q[head + (long long)row * D + d]);
    __syncthreads();
    float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
    for (int k0 = 0; k0 < S; k0 += 128) {
        const int key = k0 + t;
        float sc = -INFINITY;
        if (key < S) {
            sc = 0.0f;
            const __half* kr = k + head + (long long)key * D;
            for (int d = 0; d < D; ++d) sc += qs[d] * __half2float(kr[d]);
            sc *= scale;
        }
        float mx = sc;
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        if (t % 32 == 0) red[t / 32] = mx;
        __syncthreads();
        mx = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
        const float m_new = fmaxf(m, mx);
        const float p = key < S ? __expf(sc - m_new) : 0.0f;
        ps[t] = p;
        __syncthreads();
        const float corr = __expf(m - m_new);
        float sum = 0.0f;
        const int n = min(128, S - k0);
        for (int i = 0; i < n; ++i) sum += ps[i];
        l = l * corr + sum;
        acc0 *= corr;
        acc1 *= corr;
        for (int i = 0; i < n; ++i) {
            const __half* vr = v + head + (long long)(k0 + i) * D;
            if (t < D) acc0 += ps[i] * __half2float(vr[t]);
            if (t + 128 < D) acc1 += ps[i] * __half2float(vr[t + 128]);
        }
        m = m_new;
        __syncthreads();
    }
    __half* orow = out + head + (long long)row * D;
    if (t < D) orow[t] = __float2half(acc0 / l);
    if (t + 128 < D) orow[t + 128] = __float2half(acc1 / l);
}

typedef CUresult (*TensorMapEncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                          const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                          CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// [BH, S, 128] fp16 as a 3D tensor map with boxes of 64 columns x box_rows rows x 1 head, 128B swizzle.
bool encode_map(TensorMapEncodeTiled encode, CUtensorMap* map, const void* base, int BH, int S, int box_rows) {
    cuuint64_t dims[3] = {(cuuint64_t)FMHA_D, (cuuint64_t)S, (cuuint64_t)BH};
    cuuint64_t strides[2] = {(cuuint64_t)FMHA_D * 2, (cuuint64_t)S * FMHA_D * 2};
    cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1};
    cuuint32_t elem[3] = {1, 1, 1};
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, const_cast<void*>(base), dims, strides, box, elem,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

extern "C" cudaError_t fmha(const __half* q, const __half* k, const __half* v, __half* out, int B, int H, int S, int D,
                            cudaStream_t stream) {
    if (B <= 0 || H <= 0 || S <= 0 || D <= 0) return cudaSuccess;
    if (D > 256) return cudaErrorInvalidValue;
    const int BH = B * H;
    const bool aligned = ((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) |
                           reinterpret_cast<uintptr_t>(v)) & 15) == 0 &&
                         (reinterpret_cast<uintptr_t>(out) & 3) == 0;  // out is written as half2 pairs
    if (D == FMHA_D && aligned && BH <= 65535) {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found;
        CUtensorMap mq, mk, mv;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) ==
                cudaSuccess && found == cudaDriverEntryPointSuccess && fn != nullptr &&
            encode_map(reinterpret_cast<TensorMapEncodeTiled>(fn), &mq, q, BH, S, FMHA_BM) &&
            encode_map(reinterpret_cast<TensorMapEncodeTiled>(fn), &mk, k, BH, S, FMHA_BN) &&
            encode_map(reinterpret_cast<TensorMapEncodeTiled>(fn), &mv, v, BH, S, FMHA_BN)) {
            cudaError_t err = cudaFuncSetAttribute(fmha_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   kSmemBytes);
            if (err != cudaSuccess) return err;
            const float scale_log2 = 1.4426950408889634f / sqrtf((float)D);
            dim3 grid((S + FMHA_BM - 1) / FMHA_BM, BH);
            fmha_wgmma_kernel<<<grid, kThreads, kSmemBytes, stream>>>(mq, mk, mv, out, S, scale_log2);
            return cudaGetLastError();
        }
        cudaGetLastError();
    }
    if (BH > 65535) return cudaErrorInvalidValue;
    dim3 grid(S, BH);
    fmha_fallback_kernel<<<grid, 128, 0, stream>>>(q, k, v, out, S, D, 1.0f / sqrtf((float)D));
    return cudaGetLastError();
}
