// klineage-step: mechanism=unroll
// #pragma unroll on the shuffle loop and the three per-slice loops: fully unrolled, the UNROLL
// loads issue back to back and the register arrays are indexed by constants only.
// cumsum: out[r, c] = sum_{j <= c} x[r, j], fp32, x and out row-major contiguous. One warp per
// row, several rows per block; each lane takes one float4 of every 128-float slice,
// CUMSUM_WARP_UNROLL slices loaded before any math; a slice is scanned in registers (the lane's 4
// floats serially, the 32 lane totals with __shfl_up_sync), then the running row prefix (carry) is
// added. Every row peels a scalar head up to the next 16-byte boundary of x, runs the float4 body,
// then a scalar tail; stores are float4 when out has x's 16-byte phase, four scalar stores otherwise.
#include <cuda_runtime.h>
#include <stdint.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef CUMSUM_WARP_BLOCK
#define CUMSUM_WARP_BLOCK 256        // threads per block on the warp-per-row path (8 rows/block)
#endif
#ifndef CUMSUM_WARP_UNROLL
#define CUMSUM_WARP_UNROLL 8         // float4 per lane per step on the warp path (1024 floats)
#endif

static_assert(CUMSUM_WARP_BLOCK % 32 == 0, "block size: whole warps");

#define FULL_MASK 0xffffffffu

// Inclusive scan of one value per lane (Kogge-Stone, 5 shuffle steps). Every lane must call it.
__device__ __forceinline__ float warp_incl_scan(float v, int lane) {
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float n = __shfl_up_sync(FULL_MASK, v, o);
        if (lane >= o) v += n;
    }
    return v;
}

// In-register inclusive scan of a float4; returns the lane total (v.w).
__device__ __forceinline__ float scan4(float4& v) {
    v.y += v.x;
    v.z += v.y;
    v.w += v.z;
    return v.w;
}

__device__ __forceinline__ float4 add4(float4 v, float b) {
    return make_float4(b + v.x, b + v.y, b + v.z, b + v.w);
}

// A float4 store when out shares x's 16-byte phase, else four scalar stores; VEC_STORE is a
// template parameter, so no kernel branches per store. The address is a float4 pointer: formed as
// a float* plus a cast, nvcc split one of the coarsened warp step's stores into four scalar ones.
template <bool VEC_STORE>
__device__ __forceinline__ void store4(float4* ov, float4 v) {
    if (VEC_STORE) {
        *ov = v;
    } else {
        float* o = reinterpret_cast<float*>(ov);
        o[0] = v.x; o[1] = v.y; o[2] = v.z; o[3] = v.w;
    }
}

// Scan elements [begin, begin + n) of a row by lanes (n <= 32), write them (when `write`), and
// return the carry after them. Used for the scalar head and tail.
__device__ __forceinline__ float scan_piece(const float* __restrict__ xr, float* __restrict__ orow,
                                            int begin, int n, float carry, int lane, bool write) {
    float v = lane < n ? xr[begin + lane] : 0.f;
    v = warp_incl_scan(v, lane);
    if (write && lane < n) orow[begin + lane] = carry + v;
    return carry + __shfl_sync(FULL_MASK, v, 31);
}

// Split a row into a scalar head (up to the next 16-byte boundary of x), a float4 body, a tail.
struct RowSplit {
    int head;   // scalar elements before the first aligned float4 (0..3)
    int nvec;   // float4 count of the body
    int tail0;  // first element of the scalar tail (0..3 elements)
};

__device__ __forceinline__ RowSplit split_row(const float* row, int n) {
    RowSplit s;
    const int head = (int)(((16u - ((uint32_t)(uintptr_t)row & 15u)) & 15u) >> 2);
    s.head = head < n ? head : n;
    s.nvec = (n - s.head) >> 2;
    s.tail0 = s.head + s.nvec * 4;
    return s;
}

// ---------------- one warp per row ----------------
template <int BLOCK, int UNROLL, bool VEC_STORE>
__global__ void __launch_bounds__(BLOCK)
cumsum_warp_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * (BLOCK / 32) + (threadIdx.x >> 5);
    if (r >= rows) return;  // the whole warp leaves together: the shuffles below stay full-warp
    const float* xr = x + r * (int64_t)cols;
    float* orow = out + r * (int64_t)cols;
    const RowSplit s = split_row(xr, cols);

    float carry = 0.f;
    if (s.head > 0) carry = scan_piece(xr, orow, 0, s.head, carry, lane, true);

    const float4* xv = reinterpret_cast<const float4*>(xr + s.head);
    float4* ov = reinterpret_cast<float4*>(orow + s.head);  // 16-byte aligned when VEC_STORE
    for (int c = 0; c < s.nvec; c += 32 * UNROLL) {
        float4 v[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            const int i = c + k * 32 + lane;
            v[k] = i < s.nvec ? xv[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        float incl[UNROLL], own[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            own[k] = scan4(v[k]);
            incl[k] = warp_incl_scan(own[k], lane);
        }
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            const int i = c + k * 32 + lane;
            if (i < s.nvec) store4<VEC_STORE>(ov + i, add4(v[k], carry + (incl[k] - own[k])));
            carry += __shfl_sync(FULL_MASK, incl[k], 31);
        }
    }

    const int tail = cols - s.tail0;
    if (tail > 0) scan_piece(xr, orow, s.tail0, tail, carry, lane, true);
}

extern "C" cudaError_t cumsum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    // x and out rows advance in step, so one test says whether float4 stores line up with the
    // 16-byte-aligned float4 loads of x in every row.
    const bool vec_store = ((((uintptr_t)x) ^ ((uintptr_t)out)) & 15u) == 0;

    constexpr int rows_per_block = CUMSUM_WARP_BLOCK / 32;
    const unsigned grid = (unsigned)(((int64_t)rows + rows_per_block - 1) / rows_per_block);
    auto kernel = vec_store ? cumsum_warp_kernel<CUMSUM_WARP_BLOCK, CUMSUM_WARP_UNROLL, true>
                            : cumsum_warp_kernel<CUMSUM_WARP_BLOCK, CUMSUM_WARP_UNROLL, false>;
    kernel<<<grid, CUMSUM_WARP_BLOCK, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
