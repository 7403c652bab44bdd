// klineage-step: mechanism=smem_padding
// Each shared tile row gets TRANSPOSE_PAD extra elements: with a pitch of 34 halves (17 words), the
// column walk tile[lane][cc] of the store phase touches 32 different banks instead of 16 lanes per bank.
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

constexpr int kTile = TRANSPOSE_TILE;
constexpr int kThreads = kTile * kTile;  // one element per thread
static_assert(kTile % 32 == 0 && kThreads <= 1024, "tile edge: a multiple of 32, at most 32x32 threads");

// Block b owns tile (b / tiles_c, b % tiles_c). Load: element e = threadIdx.x sits at tile row e / kTile,
// column e % kTile, so a warp reads 32 consecutive elements of one row of x. Store: the same e now names
// tile column e / kTile (a row of out) and tile row e % kTile, so a warp writes 32 consecutive elements
// of one row of out. Elements outside the matrix are neither read nor written.
__global__ void transpose_tile_kernel(const unsigned short* __restrict__ x, unsigned short* __restrict__ out,
                                      int rows, int cols, int tiles_c) {
    __shared__ unsigned short tile[kTile][kTile + TRANSPOSE_PAD];
    const int tr = (int)(blockIdx.x / (unsigned)tiles_c);
    const int tc = (int)(blockIdx.x - (unsigned)tr * (unsigned)tiles_c);
    const int r0 = tr * kTile, c0 = tc * kTile;
    const int e = threadIdx.x;

    const int row = e / kTile, col = e % kTile;
    if (r0 + row < rows && c0 + col < cols) tile[row][col] = x[(int64_t)(r0 + row) * cols + (c0 + col)];
    __syncthreads();

    const int cc = e / kTile, rl = e % kTile;  // out row c0 + cc, out column r0 + rl
    if (c0 + cc < cols && r0 + rl < rows) out[(int64_t)(c0 + cc) * rows + (r0 + rl)] = tile[rl][cc];
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
