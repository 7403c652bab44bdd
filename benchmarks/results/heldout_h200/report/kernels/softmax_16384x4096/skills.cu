// Idiom-only start kernel of the held-out Softmax instances:
//   out[r, c] = exp(x[r, c] - max_r) / sum_c exp(x[r, c] - max_r), over the last dimension; bf16 in and
// out, fp32 math, the result rounded once to bf16. -inf entries give 0 (a row must hold a finite entry).
//
// Standard idioms at a default configuration, nothing tuned per instance:
//   * rows of at most 32 * SOFTMAX_ITEMS vectors: one warp per row (SOFTMAX_THREADS / 32 rows per
//     block), reductions with warp shuffles only;
//   * longer rows: one block per row, of as many warps as hold the row at SOFTMAX_ITEMS vectors a
//     thread (at most SOFTMAX_THREADS threads), warp shuffles then one shared-memory exchange of
//     the per-warp partials;
//   * SOFTMAX_VEC bf16 per access (16-byte loads and stores at the default), each thread keeping up to
//     SOFTMAX_ITEMS vectors of its row in registers: the row maximum, the exponentials (kept in place)
//     and their sum, then the scaled output, with the row read from memory once; rows longer than the
//     group's register capacity are streamed three times (maximum, sum, output).
// Rows whose width is not a multiple of SOFTMAX_VEC, or bases not aligned to a vector, take the same
// kernel with one element per access. Every element is read before its output is written by the same
// thread, so out may alias x (an in-place call).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

// ---- tuning constants (override with -DNAME=value; illegal values fail to compile, saying why) ----
#ifndef SOFTMAX_THREADS
#define SOFTMAX_THREADS 256  // threads per block (a row's block: at most this many)
#endif
#ifndef SOFTMAX_ITEMS
#define SOFTMAX_ITEMS 4      // vectors of its row each thread keeps in registers
#endif
#ifndef SOFTMAX_VEC
#define SOFTMAX_VEC 8        // bf16 per vector access: 8 (16 bytes), 4, 2 or 1
#endif

namespace {

constexpr int kThreads = SOFTMAX_THREADS, kItems = SOFTMAX_ITEMS, kVec = SOFTMAX_VEC;
static_assert(kThreads % 32 == 0 && kThreads >= 32 && kThreads <= 1024,
              "SOFTMAX_THREADS must be a multiple of 32 between 32 and 1024");
static_assert(kItems >= 1 && kItems <= 64, "SOFTMAX_ITEMS must be between 1 and 64");
static_assert(kVec == 1 || kVec == 2 || kVec == 4 || kVec == 8, "SOFTMAX_VEC must be 1, 2, 4 or 8");

__device__ __forceinline__ void unpack2(uint32_t w, float& lo, float& hi) {
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xffff0000u);
}

__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
           (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

// kV consecutive bf16 at p (aligned to kV elements) as floats.
template <int kV>
__device__ __forceinline__ void load_vec(const __nv_bfloat16* p, float (&v)[kV]) {
    if constexpr (kV == 8) {
        const uint4 w = *reinterpret_cast<const uint4*>(p);
        unpack2(w.x, v[0], v[1]);
        unpack2(w.y, v[2], v[3]);
        unpack2(w.z, v[4], v[5]);
        unpack2(w.w, v[6], v[7]);
    } else if constexpr (kV == 4) {
        const uint2 w = *reinterpret_cast<const uint2*>(p);
        unpack2(w.x, v[0], v[1]);
        unpack2(w.y, v[2], v[3]);
    } else if constexpr (kV == 2) {
        unpack2(*reinterpret_cast<const uint32_t*>(p), v[0], v[1]);
    } else {
        v[0] = __bfloat162float(*p);
    }
}

// kV floats rounded to bf16 and stored at p (aligned to kV elements).
template <int kV>
__device__ __forceinline__ void store_vec(__nv_bfloat16* p, const float (&v)[kV]) {
    if constexpr (kV == 8) {
        *reinterpret_cast<uint4*>(p) = make_uint4(pack2(v[0], v[1]), pack2(v[2], v[3]), pack2(v[4], v[5]),
                                                  pack2(v[6], v[7]));
    } else if constexpr (kV == 4) {
        *reinterpret_cast<uint2*>(p) = make_uint2(pack2(v[0], v[1]), pack2(v[2], v[3]));
    } else if constexpr (kV == 2) {
        *reinterpret_cast<uint32_t*>(p) = pack2(v[0], v[1]);
    } else {
        *p = __float2bfloat16_rn(v[0]);
    }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum of v over the threads sharing a row (a warp, or the whole block); every thread gets it.
template <bool kWarpRow>
__device__ __forceinline__ float group_sum(float v, float* partial) {
    v = warp_sum(v);
    if constexpr (kWarpRow) {
        return v;
    } else {
        if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
        __syncthreads();
        float s = 0.0f;
        for (int i = 0; i < static_cast<int>(blockDim.x >> 5); ++i) s += partial[i];
        __syncthreads();  // partial is free for the next reduction
        return s;
    }
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Maximum of v over the threads sharing a row (a warp, or the whole block); every thread gets it.
template <bool kWarpRow>
__device__ __forceinline__ float group_max(float v, float* partial) {
    v = warp_max(v);
    if constexpr (kWarpRow) {
        return v;
    } else {
        if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
        __syncthreads();
        float m = -INFINITY;
        for (int i = 0; i < static_cast<int>(blockDim.x >> 5); ++i) m = fmaxf(m, partial[i]);
        __syncthreads();  // partial is free for the next reduction
        return m;
    }
}

// kWarpRow: a warp per row (kThreads / 32 rows per block); otherwise a block per row, of as many threads
// (a multiple of 32, at most kThreads) as hold the row at kItems vectors each. kV elements per access;
// the host guarantees cols % kV == 0 and kV-element alignment of x and out.
template <bool kWarpRow, int kV>
__global__ void __launch_bounds__(kThreads) softmax_kernel(const __nv_bfloat16* x, __nv_bfloat16* out, int rows,
                                                           int cols) {
    __shared__ float partial[32];
    int row, t;
    if constexpr (kWarpRow) {
        row = blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5);
        t = threadIdx.x & 31;
        if (row >= rows) return;  // a whole warp; the warp path has no block barrier
    } else {
        row = blockIdx.x;
        t = threadIdx.x;
    }
    const int group = kWarpRow ? 32 : static_cast<int>(blockDim.x);  // threads sharing the row
    const __nv_bfloat16* xr = x + static_cast<long long>(row) * cols;
    __nv_bfloat16* orow = out + static_cast<long long>(row) * cols;
    const int nvec = cols / kV;

    if (nvec <= group * kItems) {  // the row fits in the group's registers: one read
        float v[kItems][kV];
        float m = -INFINITY;
#pragma unroll
        for (int i = 0; i < kItems; ++i) {
            const int j = t + i * group;
            if (j < nvec) {
                load_vec<kV>(xr + static_cast<long long>(j) * kV, v[i]);
#pragma unroll
                for (int e = 0; e < kV; ++e) m = fmaxf(m, v[i][e]);
            }
        }
        m = group_max<kWarpRow>(m, partial);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < kItems; ++i) {
            if (t + i * group < nvec) {
#pragma unroll
                for (int e = 0; e < kV; ++e) {
                    v[i][e] = __expf(v[i][e] - m);
                    s += v[i][e];
                }
            }
        }
        const float inv = 1.0f / group_sum<kWarpRow>(s, partial);
#pragma unroll
        for (int i = 0; i < kItems; ++i) {
            const int j = t + i * group;
            if (j < nvec) {
                float o[kV];
#pragma unroll
                for (int e = 0; e < kV; ++e) o[e] = v[i][e] * inv;
                store_vec<kV>(orow + static_cast<long long>(j) * kV, o);
            }
        }
    } else {  // longer rows: a pass for the maximum, one for the sum, one for the output
        float m = -INFINITY;
        for (int j = t; j < nvec; j += group) {
            float v[kV];
            load_vec<kV>(xr + static_cast<long long>(j) * kV, v);
#pragma unroll
            for (int e = 0; e < kV; ++e) m = fmaxf(m, v[e]);
        }
        m = group_max<kWarpRow>(m, partial);
        float s = 0.0f;
        for (int j = t; j < nvec; j += group) {
            float v[kV];
            load_vec<kV>(xr + static_cast<long long>(j) * kV, v);
#pragma unroll
            for (int e = 0; e < kV; ++e) s += __expf(v[e] - m);
        }
        const float inv = 1.0f / group_sum<kWarpRow>(s, partial);
        for (int j = t; j < nvec; j += group) {
            float v[kV];
            load_vec<kV>(xr + static_cast<long long>(j) * kV, v);
#pragma unroll
            for (int e = 0; e < kV; ++e) v[e] = __expf(v[e] - m) * inv;
            store_vec<kV>(orow + static_cast<long long>(j) * kV, v);
        }
    }
}

template <int kV>
cudaError_t launch(const __nv_bfloat16* x, __nv_bfloat16* out, int rows, int cols, cudaStream_t stream) {
    if (cols / kV <= 32 * kItems) {
        constexpr int kRowsPerBlock = kThreads / 32;
        const int grid = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
        softmax_kernel<true, kV><<<grid, kThreads, 0, stream>>>(x, out, rows, cols);
    } else {  // whole warps, kItems vectors a thread, at most kThreads (then the row is streamed)
        const int threads = min(kThreads, (cols / kV + 32 * kItems - 1) / (32 * kItems) * 32);
        softmax_kernel<false, kV><<<rows, threads, 0, stream>>>(x, out, rows, cols);
    }
    return cudaGetLastError();
}

bool vec_aligned(const void* p) {
    return (reinterpret_cast<uintptr_t>(p) & (kVec * sizeof(__nv_bfloat16) - 1)) == 0;
}

}  // namespace

extern "C" cudaError_t softmax(const __nv_bfloat16* x, __nv_bfloat16* out, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    if (cols % kVec == 0 && vec_aligned(x) && vec_aligned(out)) return launch<kVec>(x, out, rows, cols, stream);
    return launch<1>(x, out, rows, cols, stream);
}
