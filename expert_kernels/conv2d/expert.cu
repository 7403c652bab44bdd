// conv2d expert for the H200: 3 x 3, stride 1, padding 1, fp16 NHWC in and out, fp32 accumulation,
// as an implicit GEMM (rows: output pixels, columns: filters, k: tap x channel).
//
// Mechanisms: warpgroup MMA (wgmma.mma_async m64n128k16, sm_90a) reading both operands from
// shared memory through descriptors, two warpgroups of 64 pixels x 128 filters; an im2col gather
// with cp.async, 16 bytes (8 channels of one pixel) per copy, zero-filled in the padding, into a
// ring of CONV_STAGES stages with the 128-byte XOR swizzle the descriptors expect; one barrier per
// k-tile; each thread decodes its pixels once (the taps only shift them); blocks of 64 pixels per
// warpgroup, CONV_MIN_BLOCKS resident per SM. The fast path needs C % 8 == 0 and 16-byte aligned x and weight; other calls take the
// register-tiled fallback kernel.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef CONV_STAGES
#define CONV_STAGES 3   // shared-memory stages in the copy ring (32 KB each)
#endif
#ifndef CONV_WG
#define CONV_WG 1       // warpgroups per block, 64 output pixels each
#endif
#ifndef CONV_MIN_BLOCKS
#define CONV_MIN_BLOCKS 3  // resident blocks per SM the register budget is sized for
#endif

#define CONV_BM (64 * CONV_WG)  // output pixels per block
#define CONV_BN 128   // filters per block
#define CONV_BK 64    // channels of one tap per k-tile
#define CONV_FB_BK 16 // (fallback kernel) k-slice
#define CONV_FB_BM 128  // (fallback kernel) block tile
#define CONV_FB_BN 128
#define CONV_TM 8     // (fallback kernel) outputs per thread
#define CONV_TN 8

namespace {

constexpr int kThreads = 128 * CONV_WG;
constexpr int kTileA = CONV_BM * CONV_BK;
constexpr int kTileB = CONV_BN * CONV_BK;
constexpr int kStageBytes = (kTileA + kTileB) * 2;
constexpr int kSmemBytes = CONV_STAGES * kStageBytes + 1024;

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


// Byte offset of 16-byte chunk c (0..7) of row r in a tile of 128-byte rows (64 bf16 of k), with
// the 128-byte XOR swizzle: chunk c of row r lives at chunk c ^ (r % 8). The 8 rows an ldmatrix
// reads at one logical chunk land in 8 different 16-byte bank groups instead of one.
__device__ __forceinline__ uint32_t swizzle128(int r, int c) { return r * 128 + ((c ^ (r & 7)) * 16); }
#define CHUNK(r, c) swizzle128(r, c)

struct ConvDims {
    int M, H, W, C, F, K, cchunks;
};

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool in) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(smem_addr(dst)), "l"(src), "r"(in ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }

constexpr int kRowsA = CONV_BM * 8 / kThreads;  // x rows (16-byte chunks) a thread copies per k-tile
constexpr int kRowsB = CONV_BN * 8 / kThreads;  // weight rows

// What a thread needs of its x rows for every tap, decoded once: pixel index and (oh, ow). A thread
// always copies chunk (threadIdx.x % 8) of rows threadIdx.x / 8 + j * (kThreads / 8).
struct RowCache {
    int m[kRowsA], oh[kRowsA], ow[kRowsA];
};

__device__ __forceinline__ void decode_rows(RowCache& rc, const ConvDims& d, int m0) {
#pragma unroll
    for (int j = 0; j < kRowsA; ++j) {
        const int m = m0 + threadIdx.x / 8 + j * (kThreads / 8);
        rc.m[j] = m < d.M ? m : -1;
        rc.ow[j] = m % d.W;
        rc.oh[j] = (m / d.W) % d.H;
    }
}

// One k-tile (tap kt / cchunks, 64 channels from c0) of both operands into a stage, with cp.async;
// zero-filled in the padding, past the last pixel, filter and channel.
__device__ __forceinline__ void load_stage(uint8_t* sa, uint8_t* sb, const __half* x, const __half* w, const ConvDims& d,
                                           const RowCache& rc, int n0, int kt) {
    const int tap = kt / d.cchunks, c = (kt % d.cchunks) * CONV_BK + (threadIdx.x % 8) * 8;
    const int dr = tap / 3 - 1, ds = tap % 3 - 1;
    const bool cin = c < d.C;
#pragma unroll
    for (int j = 0; j < kRowsA; ++j) {
        const int r = threadIdx.x / 8 + j * (kThreads / 8);
        const int ih = rc.oh[j] + dr, iw = rc.ow[j] + ds;
        const bool in = cin && rc.m[j] >= 0 && ih >= 0 && ih < d.H && iw >= 0 && iw < d.W;
        const __half* src = in ? x + ((long long)rc.m[j] + dr * d.W + ds) * d.C + c : x;
        cp_async16(sa + CHUNK(r, threadIdx.x % 8), src, in);
    }
#pragma unroll
    for (int j = 0; j < kRowsB; ++j) {
        const int r = threadIdx.x / 8 + j * (kThreads / 8);
        const int f = n0 + r;
        const bool in = cin && f < d.F;
        const __half* src = in ? w + (long long)f * d.K + tap * d.C + c : w;
        cp_async16(sb + CHUNK(r, threadIdx.x % 8), src, in);
    }
}
// wgmma matrix descriptor of a K-major tile with 128-byte swizzle: rows of 64 fp16 (128 bytes),
// groups of 8 rows 1024 bytes apart (stride byte offset); the leading byte offset is unused in
// this mode. The tile base must be 1024-byte aligned.
__device__ __forceinline__ uint64_t smem_desc(const void* p) {
    uint64_t a = smem_addr(p);
    return ((a & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }

// Keeps the compiler from moving accumulator registers across an in-flight wgmma.
template <int R>
__device__ __forceinline__ void fence_regs(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

// D[64 x 128] += A[64 x 16] * B[16 x 128]: A and B from shared memory through their descriptors,
// D in 64 fp32 registers per thread of the warpgroup (the fragment layout of mma.sync, stacked along N).
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(1));
}

__global__ void __launch_bounds__(kThreads, CONV_MIN_BLOCKS)
conv2d_wgmma_kernel(const __half* __restrict__ x, const __half* __restrict__ w, __half* __restrict__ out, ConvDims d) {
    extern __shared__ uint8_t smem_raw[];
    // 128-byte swizzled tiles read by wgmma need 1024-byte aligned bases
    uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    const int m0 = blockIdx.x * CONV_BM, n0 = blockIdx.y * CONV_BN;
    const int c = threadIdx.x / 128;  // warpgroup: 64 pixels x 128 filters each
    const int tid = threadIdx.x % 128;
    const int ktiles = 9 * d.cchunks;
    RowCache rc;
    decode_rows(rc, d, m0);
    float acc[CONV_BN / 2];
#pragma unroll
    for (int i = 0; i < CONV_BN / 2; ++i) acc[i] = 0.0f;
    fence_regs(acc);
#pragma unroll
    for (int s = 0; s < CONV_STAGES - 1; ++s) {
        if (s < ktiles) load_stage(smem + s * kStageBytes, smem + s * kStageBytes + kTileA * 2, x, w, d, rc, n0, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<CONV_STAGES - 2>();
        // the copies were generic-proxy writes; wgmma reads through the async proxy
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        const int next = kt + CONV_STAGES - 1;
        if (next < ktiles) {
            uint8_t* st = smem + (next % CONV_STAGES) * kStageBytes;
            load_stage(st, st + kTileA * 2, x, w, d, rc, n0, next);
        }
        cp_async_commit();
        const __half* a = reinterpret_cast<const __half*>(smem + (kt % CONV_STAGES) * kStageBytes) + c * 64 * CONV_BK;
        const __half* b = reinterpret_cast<const __half*>(smem + (kt % CONV_STAGES) * kStageBytes) + kTileA;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < CONV_BK / 16; ++kk)
            wgmma_m64n128k16(acc, smem_desc(a + kk * 16), smem_desc(b + kk * 16));
        wgmma_commit();
        wgmma_wait<0>();  // this stage is refilled after the next barrier
    }
    fence_regs(acc);
    const bool paired = (d.F % 2 == 0) && ((reinterpret_cast<uintptr_t>(out) & 3) == 0);
    const int warp = tid / 32, lane = tid % 32;
    const int r = m0 + c * 64 + warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < CONV_BN / 8; ++j) {
        const int col = n0 + j * 8 + (lane % 4) * 2;
        store_pair(out, d.M, d.F, r, col, acc[4 * j], acc[4 * j + 1], paired);
        store_pair(out, d.M, d.F, r + 8, col, acc[4 * j + 2], acc[4 * j + 3], paired);
    }
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
        cudaError_t err = cudaFuncSetAttribute(conv2d_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
        if (err != cudaSuccess) return err;
        ConvDims d{M, H, W, C, F, 9 * C, (C + CONV_BK - 1) / CONV_BK};
        dim3 grid((M + CONV_BM - 1) / CONV_BM, (F + CONV_BN - 1) / CONV_BN);
        conv2d_wgmma_kernel<<<grid, kThreads, kSmemBytes, stream>>>(x, weight, out, d);
        return cudaGetLastError();
    }
    dim3 grid((F + CONV_FB_BN - 1) / CONV_FB_BN, (M + CONV_FB_BM - 1) / CONV_FB_BM);
    conv2d_fallback_kernel<<<grid, 256, 0, stream>>>(x, weight, out, N, H, W, C, F);
    return cudaGetLastError();
}
