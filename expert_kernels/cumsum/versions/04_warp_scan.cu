// klineage-step: mechanism=warp_scan
// Each 32-float step is scanned in registers with __shfl_up_sync (Kogge-Stone, 5 steps) instead of
// through shared memory, and the step total is broadcast from lane 31 with __shfl_sync: no shared
// stores, loads or __syncwarp per step.
// cumsum: out[r, c] = sum_{j <= c} x[r, j], fp32, x and out row-major contiguous. One warp per
// row, several rows per block; lanes read 32 consecutive floats per step (coalesced) and the
// running row prefix (carry) is added to the step's scan.
#include <cuda_runtime.h>
#include <stdint.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef CUMSUM_WARP_BLOCK
#define CUMSUM_WARP_BLOCK 256        // threads per block on the warp-per-row path (8 rows/block)
#endif

static_assert(CUMSUM_WARP_BLOCK % 32 == 0, "block size: whole warps");

#define FULL_MASK 0xffffffffu

// Inclusive scan of one value per lane (Kogge-Stone, 5 shuffle steps). Every lane must call it.
__device__ __forceinline__ float warp_incl_scan(float v, int lane) {
    for (int o = 1; o < 32; o <<= 1) {
        const float n = __shfl_up_sync(FULL_MASK, v, o);
        if (lane >= o) v += n;
    }
    return v;
}

// Scan elements [begin, begin + n) of a row by lanes (n <= 32), write them (when `write`), and
// return the carry after them.
__device__ __forceinline__ float scan_piece(const float* __restrict__ xr, float* __restrict__ orow,
                                            int begin, int n, float carry, int lane, bool write) {
    float v = lane < n ? xr[begin + lane] : 0.f;
    v = warp_incl_scan(v, lane);
    if (write && lane < n) orow[begin + lane] = carry + v;
    return carry + __shfl_sync(FULL_MASK, v, 31);
}

// ---------------- one warp per row ----------------
template <int BLOCK>
__global__ void __launch_bounds__(BLOCK)
cumsum_warp_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * (BLOCK / 32) + (threadIdx.x >> 5);
    if (r >= rows) return;  // the whole warp leaves together: the shuffles below stay full-warp
    const float* xr = x + r * (int64_t)cols;
    float* orow = out + r * (int64_t)cols;

    float carry = 0.f;
    for (int c = 0; c < cols; c += 32) {
        const int n = cols - c < 32 ? cols - c : 32;
        carry = scan_piece(xr, orow, c, n, carry, lane, true);
    }
}

extern "C" cudaError_t cumsum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    constexpr int rows_per_block = CUMSUM_WARP_BLOCK / 32;
    const unsigned grid = (unsigned)(((int64_t)rows + rows_per_block - 1) / rows_per_block);
    cumsum_warp_kernel<CUMSUM_WARP_BLOCK><<<grid, CUMSUM_WARP_BLOCK, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
