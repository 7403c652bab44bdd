// klineage-step: mechanism=vector_access
// When both bases are 16-byte aligned and rows, cols are multiples of 8, 128x64 tiles move as uint4
// (8 bf16): 16-byte loads along rows of x and 16-byte stores along rows of out, 8x fewer memory
// instructions and 8x the bytes in flight per thread. Any other shape or alignment keeps the scalar
// 32x32 tile kernel.
// bf16 values move as raw 16-bit patterns: a transpose does no arithmetic, so the copy is exact.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef TRANSPOSE_TILE
#define TRANSPOSE_TILE 32            // scalar tile edge in elements (a multiple of 32); vector tiles 4x by 2x
#endif
#ifndef TRANSPOSE_PAD
#define TRANSPOSE_PAD 2              // elements of padding per shared row: pitches of 17 / 33 words, odd in banks
#endif
#ifndef TRANSPOSE_ITEMS_PER_THREAD
#define TRANSPOSE_ITEMS_PER_THREAD 4 // elements (scalar kernel) or 16-byte vectors (vector kernel) per thread per phase
#endif

constexpr int kTile = TRANSPOSE_TILE;
constexpr int kThreads = kTile * kTile / TRANSPOSE_ITEMS_PER_THREAD;
constexpr int kWarps = kThreads / 32;
constexpr int kVRows = 4 * kTile;        // vector tile: kVRows x kVCols elements = kThreads * items vectors of 8
constexpr int kVCols = 2 * kTile;
constexpr int kLoadCols = kVCols / 64;   // load chunks (4 rows x 8 vectors = 64 columns) across a tile row
constexpr int kStoreRows = kVRows / 32;  // store chunks (8 out rows x 4 vectors = 32 x-rows) down a tile column
static_assert(kTile % 32 == 0, "tile edge: a multiple of 32");
static_assert(kTile * kTile % (32 * TRANSPOSE_ITEMS_PER_THREAD) == 0 && kThreads <= 1024,
              "the block (tile elements / items per thread) must be whole warps, at most 1024 threads");
static_assert(kVRows * (kVCols + TRANSPOSE_PAD) * sizeof(unsigned short) <= 48 * 1024,
              "the vector tile must fit in 48 KB of static shared memory");

// Scalar kernel, any shape and alignment. Block b owns tile (b / tiles_c, b % tiles_c). Item k of
// thread t is tile element e = t + kThreads * k. Load: e sits at tile row e / kTile, column e % kTile,
// so a warp reads 32 consecutive elements of one row of x. Store: the same e now names tile column
// e / kTile (a row of out) and tile row e % kTile, so a warp writes 32 consecutive elements of one row
// of out. Elements outside the matrix are neither read nor written (the guards are mirrored).
__global__ void __launch_bounds__(kThreads)
transpose_tile_kernel(const unsigned short* __restrict__ x, unsigned short* __restrict__ out,
                      int rows, int cols, int tiles_c) {
    __shared__ unsigned short tile[kTile][kTile + TRANSPOSE_PAD];
    const int tr = (int)(blockIdx.x / (unsigned)tiles_c);
    const int tc = (int)(blockIdx.x - (unsigned)tr * (unsigned)tiles_c);
    const int r0 = tr * kTile, c0 = tc * kTile;

    unsigned short v[TRANSPOSE_ITEMS_PER_THREAD];
#pragma unroll
    for (int k = 0; k < TRANSPOSE_ITEMS_PER_THREAD; ++k) {
        const int e = threadIdx.x + kThreads * k;
        const int row = e / kTile, col = e % kTile;
        v[k] = 0;
        if (r0 + row < rows && c0 + col < cols) v[k] = x[(int64_t)(r0 + row) * cols + (c0 + col)];
    }
#pragma unroll
    for (int k = 0; k < TRANSPOSE_ITEMS_PER_THREAD; ++k) {
        const int e = threadIdx.x + kThreads * k;
        tile[e / kTile][e % kTile] = v[k];
    }
    __syncthreads();

#pragma unroll
    for (int k = 0; k < TRANSPOSE_ITEMS_PER_THREAD; ++k) {
        const int e = threadIdx.x + kThreads * k;
        const int cc = e / kTile, rl = e % kTile;  // out row c0 + cc, out column r0 + rl
        if (c0 + cc < cols && r0 + rl < rows) out[(int64_t)(c0 + cc) * rows + (r0 + rl)] = tile[rl][cc];
    }
}

// Vector kernel: x, out 16-byte aligned, rows % 8 == 0, cols % 8 == 0, so every 8-element vector of a
// row is either wholly inside the matrix or wholly outside. The shared tile is kVRows x kVCols halves
// with a pitch of kVCols + 2 halves = 33 words (odd). Warp chunk ch = warp + kWarps * k.
// Load: chunk ch covers tile rows 4 * (ch / kLoadCols) + 0..3 and vectors 8 * (ch % kLoadCols) + 0..7
// of those rows; lane l takes row +(l >> 3), vector +(l & 7), so a warp reads four 128-byte row pieces.
// Half j of a vector lands in word row * 33 + 4 * (l & 7) + j / 2: banks (l >> 3) + 4 * (l & 7) + const,
// 32 different.
// Store: chunk ch covers out rows (tile columns) 8 * (ch / kStoreRows) + 0..7 and out vectors (tile row
// octets) 4 * (ch % kStoreRows) + 0..3; lane l takes out row +(l >> 2), octet +(l & 3), so a warp writes
// eight 64-byte row pieces. It gathers tile[8q + j][cc], j = 0..7: word (8q + j) * 33 + cc / 2, banks
// 8 * (l & 3) + (l >> 3) + const: 16 different words, each shared by two lanes (a broadcast, no conflict).
// A vector stored covers rows r0 + rl .. + 7 of x, all < rows when r0 + rl < rows (rows % 8 == 0), and
// column c0 + cc, whose vector was loaded when c0 + cc < cols (cols % 8 == 0): no unloaded value leaks.
__global__ void __launch_bounds__(kThreads)
transpose_vec8_kernel(const unsigned short* __restrict__ x, unsigned short* __restrict__ out,
                      int rows, int cols, int tiles_c) {
    __shared__ unsigned short tile[kVRows][kVCols + TRANSPOSE_PAD];
    const int tr = (int)(blockIdx.x / (unsigned)tiles_c);
    const int tc = (int)(blockIdx.x - (unsigned)tr * (unsigned)tiles_c);
    const int r0 = tr * kVRows, c0 = tc * kVCols;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    uint4 v[TRANSPOSE_ITEMS_PER_THREAD];
#pragma unroll
    for (int k = 0; k < TRANSPOSE_ITEMS_PER_THREAD; ++k) {
        const int ch = warp + kWarps * k;
        const int row = 4 * (ch / kLoadCols) + (lane >> 3);
        const int col = 8 * (8 * (ch % kLoadCols) + (lane & 7));
        v[k] = make_uint4(0u, 0u, 0u, 0u);
        if (r0 + row < rows && c0 + col < cols)
            v[k] = *reinterpret_cast<const uint4*>(x + (int64_t)(r0 + row) * cols + (c0 + col));
    }
#pragma unroll
    for (int k = 0; k < TRANSPOSE_ITEMS_PER_THREAD; ++k) {
        const int ch = warp + kWarps * k;
        const int row = 4 * (ch / kLoadCols) + (lane >> 3);
        const int col = 8 * (8 * (ch % kLoadCols) + (lane & 7));
        tile[row][col + 0] = (unsigned short)(v[k].x & 0xffffu);
        tile[row][col + 1] = (unsigned short)(v[k].x >> 16);
        tile[row][col + 2] = (unsigned short)(v[k].y & 0xffffu);
        tile[row][col + 3] = (unsigned short)(v[k].y >> 16);
        tile[row][col + 4] = (unsigned short)(v[k].z & 0xffffu);
        tile[row][col + 5] = (unsigned short)(v[k].z >> 16);
        tile[row][col + 6] = (unsigned short)(v[k].w & 0xffffu);
        tile[row][col + 7] = (unsigned short)(v[k].w >> 16);
    }
    __syncthreads();

#pragma unroll
    for (int k = 0; k < TRANSPOSE_ITEMS_PER_THREAD; ++k) {
        const int ch = warp + kWarps * k;
        const int cc = 8 * (ch / kStoreRows) + (lane >> 2);       // out row c0 + cc
        const int rl = 8 * (4 * (ch % kStoreRows) + (lane & 3));  // out columns r0 + rl .. r0 + rl + 7
        if (c0 + cc < cols && r0 + rl < rows) {
            uint4 w;
            w.x = (unsigned)tile[rl + 0][cc] | ((unsigned)tile[rl + 1][cc] << 16);
            w.y = (unsigned)tile[rl + 2][cc] | ((unsigned)tile[rl + 3][cc] << 16);
            w.z = (unsigned)tile[rl + 4][cc] | ((unsigned)tile[rl + 5][cc] << 16);
            w.w = (unsigned)tile[rl + 6][cc] | ((unsigned)tile[rl + 7][cc] << 16);
            *reinterpret_cast<uint4*>(out + (int64_t)(c0 + cc) * rows + (r0 + rl)) = w;
        }
    }
}

extern "C" cudaError_t transpose_bf16(const __nv_bfloat16* x, __nv_bfloat16* out, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    const unsigned short* xs = reinterpret_cast<const unsigned short*>(x);
    unsigned short* os = reinterpret_cast<unsigned short*>(out);
    const bool vec = ((rows | cols) & 7) == 0 &&
                     ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) & 15u) == 0;
    const int tile_h = vec ? kVRows : kTile, tile_w = vec ? kVCols : kTile;
    const int tiles_r = (int)(((int64_t)rows + tile_h - 1) / tile_h);
    const int tiles_c = (int)(((int64_t)cols + tile_w - 1) / tile_w);
    const unsigned grid = (unsigned)((int64_t)tiles_r * tiles_c);
    if (vec)
        transpose_vec8_kernel<<<grid, kThreads, 0, stream>>>(xs, os, rows, cols, tiles_c);
    else
        transpose_tile_kernel<<<grid, kThreads, 0, stream>>>(xs, os, rows, cols, tiles_c);
    return cudaGetLastError();
}
