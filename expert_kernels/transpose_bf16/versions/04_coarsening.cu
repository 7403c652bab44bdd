// klineage-step: mechanism=coarsening
// Each thread moves TRANSPOSE_ITEMS_PER_THREAD elements of the tile (a 256-thread block per 32x32
// tile): all its loads are issued before the first shared store, so several are in flight per thread.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef TRANSPOSE_TILE
#define TRANSPOSE_TILE 32            // tile edge in elements (a multiple of 32)
#endif
#ifndef TRANSPOSE_PAD
#define TRANSPOSE_PAD 2              // elements of padding per shared row: a pitch of 17 words, odd in banks
#endif
#ifndef TRANSPOSE_ITEMS_PER_THREAD
#define TRANSPOSE_ITEMS_PER_THREAD 4 // elements each thread moves per phase
#endif

constexpr int kTile = TRANSPOSE_TILE;
constexpr int kThreads = kTile * kTile / TRANSPOSE_ITEMS_PER_THREAD;
static_assert(kTile % 32 == 0, "tile edge: a multiple of 32");
static_assert(kTile * kTile % (32 * TRANSPOSE_ITEMS_PER_THREAD) == 0 && kThreads <= 1024,
              "the block (tile elements / items per thread) must be whole warps, at most 1024 threads");

// Block b owns tile (b / tiles_c, b % tiles_c). Item k of thread t is tile element e = t + kThreads * k.
// Load: e sits at tile row e / kTile, column e % kTile, so a warp reads 32 consecutive elements of one
// row of x. Store: the same e now names tile column e / kTile (a row of out) and tile row e % kTile,
// so a warp writes 32 consecutive elements of one row of out. Elements outside the matrix are neither
// read nor written (the load and store guards are the same condition, mirrored).
__global__ void transpose_tile_kernel(const unsigned short* __restrict__ x, unsigned short* __restrict__ out,
                                      int rows, int cols, int tiles_c) {
    __shared__ unsigned short tile[kTile][kTile + TRANSPOSE_PAD];
    const int tr = (int)(blockIdx.x / (unsigned)tiles_c);
    const int tc = (int)(blockIdx.x - (unsigned)tr * (unsigned)tiles_c);
    const int r0 = tr * kTile, c0 = tc * kTile;

    unsigned short v[TRANSPOSE_ITEMS_PER_THREAD];
    for (int k = 0; k < TRANSPOSE_ITEMS_PER_THREAD; ++k) {
        const int e = threadIdx.x + kThreads * k;
        const int row = e / kTile, col = e % kTile;
        v[k] = 0;
        if (r0 + row < rows && c0 + col < cols) v[k] = x[(int64_t)(r0 + row) * cols + (c0 + col)];
    }
    for (int k = 0; k < TRANSPOSE_ITEMS_PER_THREAD; ++k) {
        const int e = threadIdx.x + kThreads * k;
        tile[e / kTile][e % kTile] = v[k];
    }
    __syncthreads();

    for (int k = 0; k < TRANSPOSE_ITEMS_PER_THREAD; ++k) {
        const int e = threadIdx.x + kThreads * k;
        const int cc = e / kTile, rl = e % kTile;  // out row c0 + cc, out column r0 + rl
        if (c0 + cc < cols && r0 + rl < rows) out[(int64_t)(c0 + cc) * rows + (r0 + rl)] = tile[rl][cc];
    }
}

extern "C" cudaError_t transpose_bf16(const __nv_bfloat16* x, __nv_bfloat16* out, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    const unsigned short* xs = reinterpret_cast<const unsigned short*>(x);
    unsigned short* os = reinterpret_cast<unsigned short*>(out);
    const int tiles_r = (int)(((int64_t)rows + kTile - 1) / kTile);
    const int tiles_c = (int)(((int64_t)cols + kTile - 1) / kTile);
    const unsigned grid = (unsigned)((int64_t)tiles_r * tiles_c);
    transpose_tile_kernel<<<grid, kThreads, 0, stream>>>(xs, os, rows, cols, tiles_c);
    return cudaGetLastError();
}
