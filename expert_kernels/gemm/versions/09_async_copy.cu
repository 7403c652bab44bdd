// klineage-step: mechanism=async_copy
// Tiles are copied with cp.async into a ring of GEMM_STAGES shared-memory stages: GEMM_STAGES - 1
// k-tiles are in flight while the tensor cores work on the current one, and the copies bypass
// registers. One barrier per k-tile orders the ring.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef GEMM_STAGES
#define GEMM_STAGES 4   // shared-memory stages in the copy ring (48 KB each)
#endif
#ifndef GEMM_GROUP_M
#define GEMM_GROUP_M 8  // block rows that walk the N tiles together (L2 reuse of weight tiles)
#endif

#define GEMM_BM 128
#define GEMM_BN 256
#define GEMM_BK 64

namespace {

constexpr int kThreads = 256;
constexpr int kTileA = GEMM_BM * GEMM_BK;            // elements of one x tile
constexpr int kTileB = GEMM_BN * GEMM_BK;            // elements of one weight tile
constexpr int kStageBytes = (kTileA + kTileB) * 2;
constexpr int kSmemBytes = GEMM_STAGES * kStageBytes;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Grouped block order: GEMM_GROUP_M block rows sweep the N tiles together, so concurrently
// running blocks share weight tiles (and x tiles) in L2.
__device__ __forceinline__ void tile_coords(int M, int N, int& m0, int& n0) {
    const int tiles_m = (M + GEMM_BM - 1) / GEMM_BM, tiles_n = (N + GEMM_BN - 1) / GEMM_BN;
    const int bid = blockIdx.x;
    const int first_m = (bid / (GEMM_GROUP_M * tiles_n)) * GEMM_GROUP_M;
    const int rows_in_group = min(GEMM_GROUP_M, tiles_m - first_m);
    const int within = bid % (GEMM_GROUP_M * tiles_n);
    m0 = (first_m + within % rows_in_group) * GEMM_BM;
    n0 = (within / rows_in_group) * GEMM_BN;
}
__device__ __forceinline__ void store_pair(__nv_bfloat16* out, int M, int N, int r, int c, float v0, float v1,
                                           bool paired) {
    if (r >= M) return;
    __nv_bfloat16* p = out + (long long)r * N + c;
    if (paired && c + 1 < N) {
        *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
    } else {
        if (c < N) p[0] = __float2bfloat16(v0);
        if (c + 1 < N) p[1] = __float2bfloat16(v1);
    }
}


// Byte offset of 16-byte chunk c (0..7) of row r in a tile of 128-byte rows (64 bf16 of k), with
// the 128-byte XOR swizzle: chunk c of row r lives at chunk c ^ (r % 8). The 8 rows an ldmatrix
// reads at one logical chunk land in 8 different 16-byte bank groups instead of one.
__device__ __forceinline__ uint32_t swizzle128(int r, int c) { return r * 128 + ((c ^ (r & 7)) * 16); }
#define CHUNK(r, c) swizzle128(r, c)

// rows x 64 bf16 of a row-major [rows_total x K] matrix at (r0, k0) into shared memory with
// cp.async (16 bytes a thread per step, bypassing registers and L1); rows and k beyond the matrix
// are zero-filled (source size 0). Needs K % 8 == 0 and a 16-byte aligned base.
__device__ __forceinline__ void load_tile_async(uint8_t* s, const __nv_bfloat16* g, int rows_total, int K, int r0,
                                                int k0, int rows) {
    for (int i = threadIdx.x; i < rows * 8; i += kThreads) {
        const int r = i / 8, c = i % 8;
        const int gr = r0 + r, gk = k0 + c * 8;
        const bool in = gr < rows_total && gk < K;
        const __nv_bfloat16* src = in ? g + (long long)gr * K + gk : g;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                     :: "r"(smem_addr(s + CHUNK(r, c))), "l"(src), "r"(in ? 16 : 0) : "memory");
    }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// D[16 x 8] += A[16 x 16] (row-major fragment) * B[16 x 8] (column-major fragment), fp32 accumulators.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One 64-wide k-tile on the warp's 64 x 64 sub-tile: 4 k-steps of 16, each 4 ldmatrix.x4 of x,
// 4 of weight and 32 mma.sync.
__device__ __forceinline__ void warp_tile_mma(float (&acc)[4][8][4], uint32_t sa, uint32_t sb, int wm, int wn,
                                              int lane) {
#pragma unroll
    for (int kk = 0; kk < GEMM_BK / 16; ++kk) {
        uint32_t a[4][4], b[8][2];
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
            const int r = wm * 64 + mi * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
            ldmatrix_x4(a[mi], sa + CHUNK(r, kk * 2 + lane / 16));
        }
#pragma unroll
        for (int nj = 0; nj < 4; ++nj) {
            const int r = wn * 64 + nj * 16 + (lane % 8) + 8 * (lane / 16);
            uint32_t t[4];
            ldmatrix_x4(t, sb + CHUNK(r, kk * 2 + (lane / 8) % 2));
            b[2 * nj][0] = t[0];
            b[2 * nj][1] = t[1];
            b[2 * nj + 1][0] = t[2];
            b[2 * nj + 1][1] = t[3];
        }
#pragma unroll
        for (int mi = 0; mi < 4; ++mi)
#pragma unroll
            for (int ni = 0; ni < 8; ++ni) mma_16816(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
    }
}

__device__ __forceinline__ void store_warp_tile(const float (&acc)[4][8][4], __nv_bfloat16* out, int M, int N, int m0,
                                                int n0, int wm, int wn, int lane) {
    const bool paired = (N % 2 == 0) && ((reinterpret_cast<uintptr_t>(out) & 3) == 0);
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 8; ++ni) {
            const int r = m0 + wm * 64 + mi * 16 + lane / 4, c = n0 + wn * 64 + ni * 8 + (lane % 4) * 2;
            store_pair(out, M, N, r, c, acc[mi][ni][0], acc[mi][ni][1], paired);
            store_pair(out, M, N, r + 8, c, acc[mi][ni][2], acc[mi][ni][3], paired);
        }
}

__global__ void __launch_bounds__(kThreads, 1)
gemm_mma_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                __nv_bfloat16* __restrict__ out, int M, int N, int K) {
    extern __shared__ __align__(128) uint8_t smem[];
    int m0, n0;
    tile_coords(M, N, m0, n0);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / 4, wn = warp % 4;  // 2 x 4 warps, 64 x 64 outputs each
    const int ktiles = (K + GEMM_BK - 1) / GEMM_BK;
    float acc[4][8][4] = {};
    // prologue: the first GEMM_STAGES - 1 k-tiles in flight
#pragma unroll
    for (int s = 0; s < GEMM_STAGES - 1; ++s) {
        if (s < ktiles) {
            load_tile_async(smem + s * kStageBytes, x, M, K, m0, s * GEMM_BK, GEMM_BM);
            load_tile_async(smem + s * kStageBytes + kTileA * 2, w, N, K, n0, s * GEMM_BK, GEMM_BN);
        }
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<GEMM_STAGES - 2>();  // k-tile kt has landed (this thread's copies)
        __syncthreads();                    // ... every thread's; and stage kt-1 is free again
        const int next = kt + GEMM_STAGES - 1;
        if (next < ktiles) {
            uint8_t* st = smem + (next % GEMM_STAGES) * kStageBytes;
            load_tile_async(st, x, M, K, m0, next * GEMM_BK, GEMM_BM);
            load_tile_async(st + kTileA * 2, w, N, K, n0, next * GEMM_BK, GEMM_BN);
        }
        cp_async_commit();
        const uint8_t* cur = smem + (kt % GEMM_STAGES) * kStageBytes;
        warp_tile_mma(acc, smem_addr(cur), smem_addr(cur + kTileA * 2), wm, wn, lane);
    }
    store_warp_tile(acc, out, M, N, m0, n0, wm, wn, lane);
}

// Fallback for calls the copy engine cannot describe: 64 x 64 block tiles staged k-major in shared
// memory through scalar loads, 4 x 4 outputs per thread, fp32 accumulation. Any shape, any alignment.
__global__ void __launch_bounds__(256)
gemm_fallback_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                     __nv_bfloat16* __restrict__ out, int M, int N, int K) {
    __shared__ float xs[16][64];
    __shared__ float ws[16][64];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int m0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += 16) {
        for (int i = threadIdx.x; i < 16 * 64; i += 256) {
            const int rr = i % 64, kk = i / 64;
            const int gk = k0 + kk;
            xs[kk][rr] = (m0 + rr < M && gk < K) ? __bfloat162float(x[(long long)(m0 + rr) * K + gk]) : 0.0f;
            ws[kk][rr] = (n0 + rr < N && gk < K) ? __bfloat162float(w[(long long)(n0 + rr) * K + gk]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < 16; ++kk) {
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += xs[kk][ty + 16 * i] * ws[kk][tx + 16 * j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = m0 + ty + 16 * i, c = n0 + tx + 16 * j;
            if (r < M && c < N) out[(long long)r * N + c] = __float2bfloat16(acc[i][j]);
        }
}

}  // namespace

extern "C" cudaError_t gemm(const __nv_bfloat16* x, const __nv_bfloat16* weight, __nv_bfloat16* out, int M, int N,
                            int K, cudaStream_t stream) {
    if (M <= 0 || N <= 0) return cudaSuccess;
    const bool fast = K > 0 && K % 8 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0 &&
                      (reinterpret_cast<uintptr_t>(weight) & 15) == 0;
    if (fast) {
        cudaError_t err = cudaFuncSetAttribute(gemm_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
        if (err != cudaSuccess) return err;
        const int tiles = ((M + GEMM_BM - 1) / GEMM_BM) * ((N + GEMM_BN - 1) / GEMM_BN);
        gemm_mma_kernel<<<tiles, kThreads, kSmemBytes, stream>>>(x, weight, out, M, N, K);
        return cudaGetLastError();
    }
    dim3 grid((N + 63) / 64, (M + 63) / 64);
    gemm_fallback_kernel<<<grid, 256, 0, stream>>>(x, weight, out, M, N, K);
    return cudaGetLastError();
}
