// klineage-step: mechanism=block_per_row
// Rows longer than ROW_SUM_WARP_MAX_COLS get one 512-thread block each (block_sum through shared
// memory) instead of one warp: a long row is read by 16 warps, so enough loads are in flight per row.
// row_sum expert: out[r] = sum_c x[r*cols + c], fp32, x row-major contiguous.
//
// A pure streaming read: the only goal is to keep enough 16-byte loads in flight to saturate HBM.
// Two strategies, picked on the host from the shape:
//   * short rows (cols <= ROW_SUM_WARP_MAX_COLS): one warp per row, several rows per block, the
//     row reduced with warp shuffles only (no shared memory, no __syncthreads).
//   * long rows: one block per row; the block reduces the row through warp shuffles and one
//     shared-memory exchange of the per-warp partials.
// Loads use the read-only path (__ldg): on an H200, __ldcs and the L2::256B prefetch hint were
// equal or slower.
// Any row may start at any 4-byte alignment (cols need not be a multiple of 4), so every row peels a
// scalar head up to the next 16-byte boundary, runs the float4 body, then a scalar tail.
#include <cuda_runtime.h>
#include <stdint.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef ROW_SUM_WARP_MAX_COLS
#define ROW_SUM_WARP_MAX_COLS 8192   // rows up to this width get one warp each
#endif
#ifndef ROW_SUM_WARP_BLOCK
#define ROW_SUM_WARP_BLOCK 256       // threads per block on the warp-per-row path (8 rows/block)
#endif
#ifndef ROW_SUM_WARP_UNROLL
#define ROW_SUM_WARP_UNROLL 8        // float4 loads in flight per lane on the warp path
#endif
#ifndef ROW_SUM_BLOCK
#define ROW_SUM_BLOCK 512            // threads per CTA on the block path
#endif
#ifndef ROW_SUM_UNROLL
#define ROW_SUM_UNROLL 8             // float4 loads in flight per thread on the block path
#endif
#ifndef ROW_SUM_LOAD_MODE
#define ROW_SUM_LOAD_MODE 0          // 0: __ldg (read-only path); 1: __ldcs (evict-first);
#endif                               // 2: ld.global.nc.L1::no_allocate.L2::256B (prefetch hint)
#ifndef ROW_SUM_WARP_BLOCKS_PER_SM
#define ROW_SUM_WARP_BLOCKS_PER_SM 0 // 0: exact grid; >0: persistent grid of SMs*this blocks
#endif

__device__ __forceinline__ float4 rs_load4(const float4* p) {
#if ROW_SUM_LOAD_MODE == 1
    return __ldcs(p);
#elif ROW_SUM_LOAD_MODE == 2
    float4 v;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.f32 {%0,%1,%2,%3}, [%4];"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
#else
    return __ldg(p);
#endif
}
__device__ __forceinline__ float rs_load1(const float* p) {
#if ROW_SUM_LOAD_MODE == 1
    return __ldcs(p);
#else
    return __ldg(p);
#endif
}
#define RS_LOAD4(p) rs_load4(p)
#define RS_LOAD1(p) rs_load1(p)

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float hsum4(float4 v) { return (v.x + v.y) + (v.z + v.w); }

// Sum vectors [begin, end) of vp, thread `tid` of `nthr` taking vectors tid, tid+nthr, ...
// UNROLL independent loads are issued before any add so each thread keeps UNROLL*16 bytes in flight.
template <int UNROLL>
__device__ __forceinline__ float sum_vec_range(const float4* __restrict__ vp, int64_t begin,
                                               int64_t end, int tid, int nthr) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    int64_t i = begin + tid;
    const int64_t step = (int64_t)nthr * UNROLL;
    // Full chunks: every one of the UNROLL loads is in bounds, no per-load predicate.
    for (; i + (int64_t)(UNROLL - 1) * nthr < end; i += step) {
        float4 v[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) v[k] = RS_LOAD4(vp + i + (int64_t)k * nthr);
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            acc.x += v[k].x; acc.y += v[k].y; acc.z += v[k].z; acc.w += v[k].w;
        }
    }
    // Remainder: fewer than UNROLL vectors left for this thread.
    for (; i < end; i += nthr) {
        float4 v = RS_LOAD4(vp + i);
        acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
    return hsum4(acc);
}

// Split a row into a scalar head (up to the next 16-byte boundary), a float4 body and a scalar tail.
struct RowSplit {
    int head;       // scalar elements before the first aligned float4 (0..3)
    int64_t nvec;   // float4 count of the body
    int64_t tail0;  // first element of the scalar tail
};

__device__ __forceinline__ RowSplit split_row(const float* row, int64_t n) {
    RowSplit s;
    int head = (int)(((16u - ((uint32_t)(uintptr_t)row & 15u)) & 15u) >> 2);
    // A row that is not even 4-byte aligned cannot happen for float*, so head is exact.
    s.head = (int)(head < n ? head : n);
    s.nvec = (n - s.head) >> 2;
    s.tail0 = s.head + s.nvec * 4;
    return s;
}

// ---------------- short rows: one warp per row ----------------
template <int BLOCK, int UNROLL>
__global__ void __launch_bounds__(BLOCK)
row_sum_warp_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (BLOCK / 32);
    // One iteration with the exact grid; a warp-stride loop over rows with a persistent grid.
    for (int64_t r = (int64_t)blockIdx.x * (BLOCK / 32) + (threadIdx.x >> 5); r < rows; r += warps) {
        const float* row = x + r * (int64_t)cols;
        const RowSplit s = split_row(row, cols);

        float sum = 0.f;
        if (lane < s.head) sum += RS_LOAD1(row + lane);
        sum += sum_vec_range<UNROLL>(reinterpret_cast<const float4*>(row + s.head), 0, s.nvec, lane, 32);
        const int64_t t = s.tail0 + lane;
        if (t < cols) sum += RS_LOAD1(row + t);  // tail has at most 3 elements

        sum = warp_sum(sum);  // whole warp takes the same trip count: full-mask shuffles are safe
        if (lane == 0) out[r] = sum;
    }
}

// ---------------- long rows: one block per row ----------------
template <int BLOCK>
__device__ __forceinline__ float block_sum(float v, float* s_warp) {
    v = warp_sum(v);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) s_warp[warp] = v;
    __syncthreads();
    v = 0.f;
    if (warp == 0) {
        v = lane < BLOCK / 32 ? s_warp[lane] : 0.f;
        v = warp_sum(v);
    }
    return v;  // valid in thread 0
}

template <int BLOCK, int UNROLL>
__global__ void __launch_bounds__(BLOCK)
row_sum_block_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    __shared__ float s_warp[BLOCK / 32];

    const int64_t r = blockIdx.x;
    const float* row = x + r * (int64_t)cols;
    const RowSplit s = split_row(row, cols);

    float sum = sum_vec_range<UNROLL>(reinterpret_cast<const float4*>(row + s.head), 0, s.nvec,
                                      threadIdx.x, BLOCK);
    if (threadIdx.x < s.head) sum += RS_LOAD1(row + threadIdx.x);
    const int64_t t = s.tail0 + threadIdx.x;
    if (t < cols) sum += RS_LOAD1(row + t);
    sum = block_sum<BLOCK>(sum, s_warp);

    if (threadIdx.x == 0) out[r] = sum;
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0) return cudaSuccess;
    if (cols <= 0) {  // empty rows sum to zero (not reachable with shapes >= 1, kept for safety)
        cudaMemsetAsync(out, 0, sizeof(float) * (size_t)rows, stream);
        return cudaGetLastError();
    }

    if (cols <= ROW_SUM_WARP_MAX_COLS) {
        constexpr int rows_per_block = ROW_SUM_WARP_BLOCK / 32;
        unsigned grid = (unsigned)((rows + rows_per_block - 1) / rows_per_block);
        if (ROW_SUM_WARP_BLOCKS_PER_SM > 0) {
            int dev = 0, sms = 0;
            cudaGetDevice(&dev);
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
            const unsigned cap = (unsigned)(sms > 0 ? sms : 132) * ROW_SUM_WARP_BLOCKS_PER_SM;
            if (grid > cap) grid = cap;
        }
        row_sum_warp_kernel<ROW_SUM_WARP_BLOCK, ROW_SUM_WARP_UNROLL>
            <<<grid, ROW_SUM_WARP_BLOCK, 0, stream>>>(x, out, rows, cols);
        return cudaGetLastError();
    }

    // Long rows: one block per row.
    const unsigned grid = (unsigned)rows;
    auto kernel = row_sum_block_kernel<ROW_SUM_BLOCK, ROW_SUM_UNROLL>;
    kernel<<<grid, ROW_SUM_BLOCK, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
