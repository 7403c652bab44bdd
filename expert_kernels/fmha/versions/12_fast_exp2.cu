// klineage-step: mechanism=fast_exp2
// The tensor-core kernel's exponentials become one ex2.approx.ftz.f32 each: the scores are scaled
// by log2(e) / sqrt(D) instead of 1 / sqrt(D) as they leave the accumulators, so the running
// maximum lives in the base-2 domain too and exp(x - m) is ex2(x' - m'), with no multiply by
// log2(e) and none of __expf's handling around the MUFU operation. ex2(-inf) = +0 keeps the masked
// keys and the first tile's rescale factor at zero. The fallback keeps __expf.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

#ifndef FMHA_STAGES
#define FMHA_STAGES 2  // k/v stages in the copy ring (32 KB each)
#endif

#define FMHA_BM 64   // query rows per block (16 per warp)
#define FMHA_BN 64   // keys per tile
#define FMHA_D 128

namespace {

constexpr int kThreads = 128;
constexpr int kTileBytes = FMHA_BN * FMHA_D * 2;  // one 64-row tile of q, k or v (FMHA_BM == FMHA_BN)
constexpr int kStageBytes = 2 * kTileBytes;       // a k tile and a v tile
constexpr int kSmemBytes = kTileBytes + FMHA_STAGES * kStageBytes;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Byte offset of 16-byte chunk c (0..15) of row r in a tile of 256-byte rows (128 halves of D),
// swizzled: the chunk's low three bits are XORed with the row's, so 8 consecutive rows put one
// logical chunk in 8 different 16-byte bank groups.
__device__ __forceinline__ uint32_t chunk_offset(int r, int c) { return r * 256 + ((c ^ (r & 7)) * 16); }

// 16 bytes from global to shared memory, not through registers (cached in L2 only); a source size
// of 0 writes 16 zero bytes.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }

// Rows r0 .. r0 + 63 of one head ([S][128] fp16) into a shared tile with cp.async, 16 bytes a
// thread per step; rows past S are zero-filled (their keys are masked; zero values keep 0 * v finite).
__device__ __forceinline__ void load_tile_async(uint8_t* s, const __half* g, int S, int r0) {
#pragma unroll
    for (int it = 0; it < FMHA_BN * 16 / kThreads; ++it) {
        const int i = threadIdx.x + it * kThreads;
        const int r = i / 16, c = i % 16;
        const bool in = r0 + r < S;
        cp_async_16(smem_addr(s + chunk_offset(r, c)), in ? g + (long long)(r0 + r) * FMHA_D + c * 8 : g, in ? 16 : 0);
    }
}

// Four 8 x 8 fp16 matrices; lane l gives the address of row l % 8 of matrix l / 8 and receives,
// from each matrix, row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1.
__device__ __forceinline__ void ldmatrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

// The same, each matrix transposed: lane l receives rows 2 (l % 4) and 2 (l % 4) + 1 of column l / 4.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                                  uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

// D[16 x 8] += A[16 x 16] (row-major fragment a0..a3) * B[16 x 8] (column-major fragment b0, b1),
// fp16 operands, fp32 accumulators.
__device__ __forceinline__ void mma_16816(float& d0, float& d1, float& d2, float& d3, uint32_t a0, uint32_t a1,
                                          uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 2^x in one MUFU operation (ftz: results below 2^-126 flush to zero, against a row sum >= 1)
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}

__global__ void __launch_bounds__(kThreads)
fmha_mma_kernel(const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
                __half* __restrict__ out, int S, float scale_log2) {
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t* sQ = smem;
    uint8_t* sK = smem + kTileBytes;  // stage s: sK + s * kStageBytes
    uint8_t* sV = sK + kTileBytes;    // stage s: sV + s * kStageBytes
    const int q0 = blockIdx.x * FMHA_BM;
    const long long head = (long long)blockIdx.y * S * FMHA_D;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int c2 = (lane % 4) * 2;  // the first of this lane's two columns in every 8-column n-tile

    const int ntiles = (S + FMHA_BN - 1) / FMHA_BN;

    // copy groups: q, then tiles 0 .. FMHA_STAGES - 2 (one group each, empty past the last tile)
    load_tile_async(sQ, q + head, S, q0);
    cp_async_commit();
#pragma unroll
    for (int s = 0; s < FMHA_STAGES - 1; ++s) {
        if (s < ntiles) {
            load_tile_async(sK + s * kStageBytes, k + head, S, s * FMHA_BN);
            load_tile_async(sV + s * kStageBytes, v + head, S, s * FMHA_BN);
        }
        cp_async_commit();
    }
    cp_async_wait<FMHA_STAGES - 1>();  // the q group has landed
    __syncthreads();
    // the warp's 16 query rows as A fragments: k-step kk (columns 16kk .. 16kk + 15 of D) in qa[4kk .. 4kk + 3]
    uint32_t qa[32];
#pragma unroll
    for (int kk = 0; kk < FMHA_D / 16; ++kk) {
        const int r = warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
        ldmatrix_x4(qa[4 * kk], qa[4 * kk + 1], qa[4 * kk + 2], qa[4 * kk + 3],
                    smem_addr(sQ + chunk_offset(r, 2 * kk + lane / 16)));
    }

    // o: 16 rows x 128 columns per warp; n-tile n (columns 8n .. 8n + 7) in o[4n .. 4n + 3]: rows
    // lane / 4 (o[4n], o[4n + 1]) and lane / 4 + 8 (o[4n + 2], o[4n + 3]), columns 8n + c2, 8n + c2 + 1
    float o[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

    for (int j = 0; j < ntiles; ++j) {
        cp_async_wait<FMHA_STAGES - 2>();  // this thread's copies of tile j have landed
        __syncthreads();                    // everyone's have; every warp is done with tile j - 1
        const int next = j + FMHA_STAGES - 1;
        if (next < ntiles) {  // refill the stage tile j - 1 used
            load_tile_async(sK + (next % FMHA_STAGES) * kStageBytes, k + head, S, next * FMHA_BN);
            load_tile_async(sV + (next % FMHA_STAGES) * kStageBytes, v + head, S, next * FMHA_BN);
        }
        cp_async_commit();
        const int k0 = j * FMHA_BN;
        const uint8_t* kt = sK + (j % FMHA_STAGES) * kStageBytes;
        const uint8_t* vt = sV + (j % FMHA_STAGES) * kStageBytes;

        // s = q k^T: n-tile n (keys k0 + 8n .. k0 + 8n + 7) in sacc[4n .. 4n + 3]
        float sacc[32];
#pragma unroll
        for (int i = 0; i < 32; ++i) sacc[i] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < FMHA_D / 16; ++kk) {
#pragma unroll
            for (int np = 0; np < FMHA_BN / 16; ++np) {
                // keys 16np .. 16np + 15: matrices (keys +0..7, d 16kk +0..7), (+0..7, +8..15), (+8..15, +0..7), (+8..15, +8..15)
                uint32_t b0, b1, b2, b3;
                const int r = np * 16 + (lane % 8) + 8 * (lane / 16);
                ldmatrix_x4(b0, b1, b2, b3, smem_addr(kt + chunk_offset(r, 2 * kk + (lane / 8) % 2)));
                mma_16816(sacc[8 * np], sacc[8 * np + 1], sacc[8 * np + 2], sacc[8 * np + 3], qa[4 * kk],
                          qa[4 * kk + 1], qa[4 * kk + 2], qa[4 * kk + 3], b0, b1);
                mma_16816(sacc[8 * np + 4], sacc[8 * np + 5], sacc[8 * np + 6], sacc[8 * np + 7], qa[4 * kk],
                          qa[4 * kk + 1], qa[4 * kk + 2], qa[4 * kk + 3], b2, b3);
            }
        }

        // online softmax over the tile (rows lane / 4 and lane / 4 + 8; a row's 64 scores sit in 4 lanes),
        // in base 2: keys past S score -inf; the running maximum and sum move on, o is rescaled
        float mx[2] = {m_run[0], m_run[1]};
#pragma unroll
        for (int n = 0; n < FMHA_BN / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float x = sacc[4 * n + e] * scale_log2;
                if (k0 + n * 8 + c2 + (e & 1) >= S) x = -INFINITY;
                sacc[4 * n + e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        }
        float corr[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            corr[r] = ex2(m_run[r] - mx[r]);
            m_run[r] = mx[r];
        }
        // the probabilities as fp16 pairs: p[2n] = row lane / 4, p[2n + 1] = row lane / 4 + 8 of n-tile n,
        // so keys 16t .. 16t + 15 are the A fragment p[4t .. 4t + 3]
        uint32_t p[16];
#pragma unroll
        for (int n = 0; n < FMHA_BN / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                sacc[4 * n + e] = ex2(sacc[4 * n + e] - mx[e >> 1]);
                rs[e >> 1] += sacc[4 * n + e];
            }
            p[2 * n] = pack_half2(sacc[4 * n], sacc[4 * n + 1]);
            p[2 * n + 1] = pack_half2(sacc[4 * n + 2], sacc[4 * n + 3]);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * corr[r] + rs[r];
#pragma unroll
        for (int n = 0; n < FMHA_D / 8; ++n) {
            o[4 * n] *= corr[0];
            o[4 * n + 1] *= corr[0];
            o[4 * n + 2] *= corr[1];
            o[4 * n + 3] *= corr[1];
        }

        // o += p v: keys 16t .. 16t + 15, columns 16dp .. 16dp + 15 (n-tiles 2dp, 2dp + 1); matrices
        // (keys +0..7, d +0..7), (+8..15, +0..7), (+0..7, +8..15), (+8..15, +8..15), read transposed
#pragma unroll
        for (int t = 0; t < FMHA_BN / 16; ++t) {
#pragma unroll
            for (int dp = 0; dp < FMHA_D / 16; ++dp) {
                uint32_t b0, b1, b2, b3;
                const int r = t * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
                ldmatrix_x4_trans(b0, b1, b2, b3, smem_addr(vt + chunk_offset(r, 2 * dp + lane / 16)));
                mma_16816(o[8 * dp], o[8 * dp + 1], o[8 * dp + 2], o[8 * dp + 3], p[4 * t], p[4 * t + 1], p[4 * t + 2],
                          p[4 * t + 3], b0, b1);
                mma_16816(o[8 * dp + 4], o[8 * dp + 5], o[8 * dp + 6], o[8 * dp + 7], p[4 * t], p[4 * t + 1],
                          p[4 * t + 2], p[4 * t + 3], b2, b3);
            }
        }
    }

    // finish: full row sums across the 4 lanes of a row, normalize, store rows < S
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
        l_run[r] = 1.0f / l_run[r];
    }
    const int row = q0 + warp * 16 + lane / 4;
    __half* base = out + head;
#pragma unroll
    for (int n = 0; n < FMHA_D / 8; ++n) {
        const int col = n * 8 + c2;
        if (row < S)
            *reinterpret_cast<__half2*>(base + (long long)row * FMHA_D + col) =
                __floats2half2_rn(o[4 * n] * l_run[0], o[4 * n + 1] * l_run[0]);
        if (row + 8 < S)
            *reinterpret_cast<__half2*>(base + (long long)(row + 8) * FMHA_D + col) =
                __floats2half2_rn(o[4 * n + 2] * l_run[1], o[4 * n + 3] * l_run[1]);
    }
}

// Fallback for calls the tensor-core kernel does not take (D != 128, bases not 16-byte aligned): one
// block of 128 threads per query row; scores of 128 keys at a time in shared memory, online softmax, thread d
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

}  // namespace

extern "C" cudaError_t fmha(const __half* q, const __half* k, const __half* v, __half* out, int B, int H, int S, int D,
                            cudaStream_t stream) {
    if (B <= 0 || H <= 0 || S <= 0 || D <= 0) return cudaSuccess;
    if (D > 256 || B * H > 65535) return cudaErrorInvalidValue;
    const float scale = 1.0f / sqrtf((float)D);
    const bool aligned = ((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) |
                           reinterpret_cast<uintptr_t>(v) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;
    if (D == FMHA_D && aligned) {
        cudaError_t err = cudaFuncSetAttribute(fmha_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
        if (err != cudaSuccess) return err;
        dim3 grid((S + FMHA_BM - 1) / FMHA_BM, B * H);
        const float scale_log2 = 1.4426950408889634f / sqrtf((float)D);
        fmha_mma_kernel<<<grid, kThreads, kSmemBytes, stream>>>(q, k, v, out, S, scale_log2);
        return cudaGetLastError();
    }
    dim3 grid(S, B * H);
    fmha_fallback_kernel<<<grid, 128, 0, stream>>>(q, k, v, out, S, D, scale);
    return cudaGetLastError();
}
