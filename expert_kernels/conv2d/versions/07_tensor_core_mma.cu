// klineage-step: mechanism=tensor_core_mma
// The implicit GEMM runs on the tensor cores: mma.sync m16n8k16 (fp16 in, fp32 accumulate) fed by
// ldmatrix.x4 from shared memory. Block tile 128 pixels x 128 filters x 64 channels of one tap
// (configuration), 4 warps of 64 x 64 outputs each; the tiles are gathered with 16-byte vector
// loads (one 16-byte chunk = 8 channels of one pixel) into plain row-major shared memory, one
// k-tile at a time. Calls the vectors cannot serve (C % 8 != 0, misaligned bases) take the
// register-tiled kernel as a fallback.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

// ---- tuning constants (override with -DNAME=value) ----

#define CONV_BM 128   // output pixels per block
#define CONV_BN 128   // filters per block
#define CONV_BK 64    // channels of one tap per k-tile
#define CONV_FB_BK 16 // (fallback kernel) k-slice
#define CONV_FB_BM 128  // (fallback kernel) block tile
#define CONV_FB_BN 128
#define CONV_TM 8     // (fallback kernel) outputs per thread
#define CONV_TN 8

namespace {

constexpr int kThreads = 128;
constexpr int kTileA = CONV_BM * CONV_BK;
constexpr int kTileB = CONV_BN * CONV_BK;
constexpr int kStageBytes = (kTileA + kTileB) * 2;
constexpr int kSmemBytes = kStageBytes;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void store_pair(__half* out, int M, int N, int r, int c, float v0, float v1,
                                           bool paired) {
    if (r >= M) return;
    __half* p = out + (long long)r * N + c;
    if (paired && c + 1 < N) {
        *reinterpret_cast<__half2*>(p) = __floats2half2_rn(v0, v1);
    } else {
        if (c < N) p[0] = __float2half(v0);
        if (c + 1 < N) p[1] = __float2half(v1);
    }
}


// Byte offset of 16-byte chunk c (0..7) of row r in a tile of 128-byte rows (64 bf16 of k).
__device__ __forceinline__ uint32_t chunk_offset(int r, int c) { return r * 128 + c * 16; }
#define CHUNK(r, c) chunk_offset(r, c)

// One k-tile of the implicit GEMM: tap (r, s) = (kt / cchunks) and 64 channels from c0. The x tile
// is a gather: row m is 64 channels of input pixel (n, oh + r - 1, ow + s - 1), 8 chunks of 16
// bytes, zeros in the padding, past the last pixel and past C. The weight tile is 128 filters x
// the same 64 k. Needs C % 8 == 0 and 16-byte aligned bases.
struct ConvDims {
    int M, H, W, C, F, K, cchunks;
};

__device__ __forceinline__ const __half* x_chunk(const __half* x, const ConvDims& d, int m, int tap, int c, bool& in) {
    in = m < d.M && c < d.C;
    if (!in) return x;
    const int ow = m % d.W, oh = (m / d.W) % d.H, n = m / (d.W * d.H);
    const int ih = oh + tap / 3 - 1, iw = ow + tap % 3 - 1;
    in = ih >= 0 && ih < d.H && iw >= 0 && iw < d.W;
    return in ? x + (((long long)n * d.H + ih) * d.W + iw) * d.C + c : x;
}

__device__ __forceinline__ const __half* w_chunk(const __half* w, const ConvDims& d, int f, int tap, int c, bool& in) {
    in = f < d.F && c < d.C;
    return in ? w + (long long)f * d.K + tap * d.C + c : w;
}

__device__ __forceinline__ void load_tiles(uint8_t* sa, uint8_t* sb, const __half* x, const __half* w, const ConvDims& d,
                                           int m0, int n0, int kt) {
    const int tap = kt / d.cchunks, c0 = (kt % d.cchunks) * CONV_BK;
    for (int i = threadIdx.x; i < CONV_BM * 8; i += kThreads) {
        const int r = i / 8, ch = i % 8;
        bool in;
        const __half* src = x_chunk(x, d, m0 + r, tap, c0 + ch * 8, in);
        *reinterpret_cast<uint4*>(sa + CHUNK(r, ch)) = in ? *reinterpret_cast<const uint4*>(src) : make_uint4(0u, 0u, 0u, 0u);
    }
    for (int i = threadIdx.x; i < CONV_BN * 8; i += kThreads) {
        const int r = i / 8, ch = i % 8;
        bool in;
        const __half* src = w_chunk(w, d, n0 + r, tap, c0 + ch * 8, in);
        *reinterpret_cast<uint4*>(sb + CHUNK(r, ch)) = in ? *reinterpret_cast<const uint4*>(src) : make_uint4(0u, 0u, 0u, 0u);
    }
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// D[16 x 8] += A[16 x 16] (row-major fragment) * B[16 x 8] (column-major fragment), fp32 accumulators.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One 64-wide k-tile on the warp's 64 x 64 sub-tile: 4 k-steps of 16, each 4 ldmatrix.x4 of x,
// 4 of weight and 32 mma.sync.
__device__ __forceinline__ void warp_tile_mma(float (&acc)[4][8][4], uint32_t sa, uint32_t sb, int wm, int wn,
                                              int lane) {
#pragma unroll
    for (int kk = 0; kk < CONV_BK / 16; ++kk) {
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

__device__ __forceinline__ void store_warp_tile(const float (&acc)[4][8][4], __half* out, int M, int N, int m0,
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
conv2d_mma_kernel(const __half* __restrict__ x, const __half* __restrict__ w, __half* __restrict__ out, ConvDims d) {
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t* sA = smem;
    uint8_t* sB = smem + kTileA * 2;
    const int m0 = blockIdx.x * CONV_BM, n0 = blockIdx.y * CONV_BN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / 2, wn = warp % 2;  // 2 x 2 warps, 64 x 64 outputs each
    float acc[4][8][4] = {};
    for (int kt = 0; kt < 9 * d.cchunks; ++kt) {
        __syncthreads();
        load_tiles(sA, sB, x, w, d, m0, n0, kt);
        __syncthreads();
        warp_tile_mma(acc, smem_addr(sA), smem_addr(sB), wm, wn, lane);
    }
    store_warp_tile(acc, out, d.M, d.F, m0, n0, wm, wn, lane);
}

// Element (m, k) of the implicit GEMM's left operand: m an output pixel (n, oh, ow), k a tap and
// channel (k = (r * 3 + s) * C + c); zero in the padding and beyond the matrix.
__device__ __forceinline__ float im2col(const __half* x, int m, int k, int M, int H, int W, int C) {
    if (m >= M || k >= 9 * C) return 0.0f;
    const int tap = k / C, c = k % C;
    const int ow = m % W, oh = (m / W) % H, n = m / (W * H);
    const int ih = oh + tap / 3 - 1, iw = ow + tap % 3 - 1;
    if (ih < 0 || ih >= H || iw < 0 || iw >= W) return 0.0f;
    return __half2float(x[(((long long)n * H + ih) * W + iw) * C + c]);
}

// Fallback for calls the 16-byte copies cannot serve (C % 8 != 0, misaligned bases): the register-
// tiled SIMT implicit GEMM. Any shape, any alignment.
__global__ void __launch_bounds__(256)
conv2d_fallback_kernel(const __half* __restrict__ x, const __half* __restrict__ w, __half* __restrict__ out, int N, int H,
                      int W, int C, int F) {
    const int M = N * H * W, K = 9 * C;
    __shared__ float xs[CONV_FB_BK][CONV_FB_BM];  // k-major, so a thread's 8 values are contiguous
    __shared__ float ws[CONV_FB_BK][CONV_FB_BN];
    const int tid = threadIdx.x;
    const int tr = tid / 16, tc = tid % 16;  // 16 x 16 threads, each 8 x 8 outputs
    const int m0 = blockIdx.y * CONV_FB_BM, n0 = blockIdx.x * CONV_FB_BN;
    float acc[CONV_TM][CONV_TN] = {};
    for (int k0 = 0; k0 < K; k0 += CONV_FB_BK) {
        for (int i = tid; i < CONV_FB_BK * CONV_FB_BM; i += 256) {
            const int r = i % CONV_FB_BM, kk = i / CONV_FB_BM;  // consecutive threads, consecutive rows
            const bool kin = k0 + kk < K;
            xs[kk][r] = im2col(x, m0 + r, k0 + kk, M, H, W, C);
            ws[kk][r] = (n0 + r < F && kin) ? __half2float(w[(long long)(n0 + r) * K + k0 + kk]) : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < CONV_FB_BK; ++kk) {
            float a[CONV_TM], b[CONV_TN];
            #pragma unroll
            for (int i = 0; i < CONV_TM; ++i) a[i] = xs[kk][tr * CONV_TM + i];
            #pragma unroll
            for (int j = 0; j < CONV_TN; ++j) b[j] = ws[kk][tc * CONV_TN + j];
            #pragma unroll
            for (int i = 0; i < CONV_TM; ++i)
                #pragma unroll
                for (int j = 0; j < CONV_TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
    const bool paired = (F % 2 == 0) && ((reinterpret_cast<uintptr_t>(out) & 3) == 0);
#pragma unroll
    for (int i = 0; i < CONV_TM; ++i) {
        const int r = m0 + tr * CONV_TM + i;
        if (r >= M) continue;
        #pragma unroll
        for (int j = 0; j < CONV_TN; j += 2) {
            const int c = n0 + tc * CONV_TN + j;
            __half* p = out + (long long)r * F + c;
            if (paired && c + 1 < F) {
                *reinterpret_cast<__half2*>(p) = __floats2half2_rn(acc[i][j], acc[i][j + 1]);
            } else {
                if (c < F) p[0] = __float2half(acc[i][j]);
                if (c + 1 < F) p[1] = __float2half(acc[i][j + 1]);
            }
        }
    }
}

}  // namespace

extern "C" cudaError_t conv2d(const __half* x, const __half* weight, __half* out, int N, int H, int W, int C, int F,
                              cudaStream_t stream) {
    const int M = N * H * W;
    if (M <= 0 || F <= 0) return cudaSuccess;
    const bool fast = C % 8 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0 &&
                      (reinterpret_cast<uintptr_t>(weight) & 15) == 0;
    if (fast) {
        cudaError_t err = cudaFuncSetAttribute(conv2d_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
        if (err != cudaSuccess) return err;
        ConvDims d{M, H, W, C, F, 9 * C, (C + CONV_BK - 1) / CONV_BK};
        dim3 grid((M + CONV_BM - 1) / CONV_BM, (F + CONV_BN - 1) / CONV_BN);
        conv2d_mma_kernel<<<grid, kThreads, kSmemBytes, stream>>>(x, weight, out, d);
        return cudaGetLastError();
    }
    dim3 grid((F + CONV_FB_BN - 1) / CONV_FB_BN, (M + CONV_FB_BM - 1) / CONV_FB_BM);
    conv2d_fallback_kernel<<<grid, 256, 0, stream>>>(x, weight, out, N, H, W, C, F);
    return cudaGetLastError();
}
