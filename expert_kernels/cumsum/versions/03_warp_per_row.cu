// klineage-step: mechanism=warp_per_row
// One warp per row (8 rows per 256-thread block) instead of one thread: lanes read and write 32
// consecutive floats per step, so accesses coalesce into full 128-byte lines; each step is scanned
// by a Hillis-Steele scan through the warp's slice of shared memory, and the running row prefix
// (carry) is carried from step to step.
#include <cuda_runtime.h>
#include <stdint.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef CUMSUM_WARP_BLOCK
#define CUMSUM_WARP_BLOCK 256        // threads per block on the warp-per-row path (8 rows/block)
#endif

static_assert(CUMSUM_WARP_BLOCK % 32 == 0, "block size: whole warps");

// ---------------- one warp per row ----------------
template <int BLOCK>
__global__ void __launch_bounds__(BLOCK)
cumsum_warp_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    __shared__ float s_scan[BLOCK];  // warp w scans in s_scan[32w, 32w + 32)
    const int lane = threadIdx.x & 31;
    float* s = s_scan + (threadIdx.x & ~31u);
    const int64_t r = (int64_t)blockIdx.x * (BLOCK / 32) + (threadIdx.x >> 5);
    if (r >= rows) return;  // the whole warp leaves together: its __syncwarp calls stay full-warp
    const float* xr = x + r * (int64_t)cols;
    float* orow = out + r * (int64_t)cols;

    float carry = 0.f;
    for (int c = 0; c < cols; c += 32) {
        const int n = cols - c < 32 ? cols - c : 32;
        float v = lane < n ? xr[c + lane] : 0.f;
        for (int o = 1; o < 32; o <<= 1) {
            s[lane] = v;
            __syncwarp();
            if (lane >= o) v += s[lane - o];
            __syncwarp();
        }
        if (lane < n) orow[c + lane] = carry + v;
        s[lane] = v;
        __syncwarp();
        carry += s[31];  // the step total, from the last lane
        __syncwarp();
    }
}

extern "C" cudaError_t cumsum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    constexpr int rows_per_block = CUMSUM_WARP_BLOCK / 32;
    const unsigned grid = (unsigned)(((int64_t)rows + rows_per_block - 1) / rows_per_block);
    cumsum_warp_kernel<CUMSUM_WARP_BLOCK><<<grid, CUMSUM_WARP_BLOCK, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
