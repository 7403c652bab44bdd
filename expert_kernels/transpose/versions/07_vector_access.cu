// klineage-step: mechanism=vector_access
// When both bases are 16-byte aligned and rows, cols are multiples of 4, 64x64 tiles move as float4:
// 16-byte loads along rows of x and 16-byte stores along rows of out, 4x fewer memory instructions and
// 4x the bytes in flight per thread. Any other shape or alignment keeps the scalar 32x32 tile kernel.
#include <cuda_runtime.h>
#include <stdint.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef TRANSPOSE_TILE
#define TRANSPOSE_TILE 32            // scalar tile edge in elements (a multiple of 32); vector tiles are 2x
#endif
#ifndef TRANSPOSE_PAD
#define TRANSPOSE_PAD 1              // floats of padding per shared row: the row pitch is odd in banks
#endif
#ifndef TRANSPOSE_ITEMS_PER_THREAD
#define TRANSPOSE_ITEMS_PER_THREAD 4 // elements (scalar kernel) or float4s (vector kernel) per thread per phase
#endif

constexpr int kTile = TRANSPOSE_TILE;
constexpr int kThreads = kTile * kTile / TRANSPOSE_ITEMS_PER_THREAD;
constexpr int kWarps = kThreads / 32;
constexpr int kVTile = 2 * kTile;        // kVTile^2 / 4 float4s = kThreads * items: same block, 4x the bytes
constexpr int kChunkCols = kVTile / 32;  // warp chunks (4 rows x 8 float4s) across one vector-tile row
static_assert(kTile % 32 == 0, "tile edge: a multiple of 32");
static_assert(kTile * kTile % (32 * TRANSPOSE_ITEMS_PER_THREAD) == 0 && kThreads <= 1024,
              "the block (tile elements / items per thread) must be whole warps, at most 1024 threads");
static_assert(kVTile * (kVTile + TRANSPOSE_PAD) * sizeof(float) <= 48 * 1024,
              "the vector tile must fit in 48 KB of static shared memory");

// Scalar kernel, any shape and alignment. Block b owns tile (b / tiles_c, b % tiles_c). Item k of
// thread t is tile element e = t + kThreads * k. Load: e sits at tile row e / kTile, column e % kTile,
// so a warp reads 32 consecutive floats of one row of x. Store: the same e now names tile column
// e / kTile (a row of out) and tile row e % kTile, so a warp writes 32 consecutive floats of one row
// of out. Elements outside the matrix are neither read nor written (the guards are mirrored).
__global__ void __launch_bounds__(kThreads)
transpose_tile_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols, int tiles_c) {
    __shared__ float tile[kTile][kTile + TRANSPOSE_PAD];
    const int tr = (int)(blockIdx.x / (unsigned)tiles_c);
    const int tc = (int)(blockIdx.x - (unsigned)tr * (unsigned)tiles_c);
    const int r0 = tr * kTile, c0 = tc * kTile;

    float v[TRANSPOSE_ITEMS_PER_THREAD];
#pragma unroll
    for (int k = 0; k < TRANSPOSE_ITEMS_PER_THREAD; ++k) {
        const int e = threadIdx.x + kThreads * k;
        const int row = e / kTile, col = e % kTile;
        v[k] = 0.f;
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

// Vector kernel: x, out 16-byte aligned, rows % 4 == 0, cols % 4 == 0, so every float4 of a row is
// either wholly inside the matrix or wholly outside. Warp chunk ch = warp + kWarps * k.
// Load: chunk ch covers tile rows 4 * (ch / kChunkCols) + 0..3 and float4 columns
// 8 * (ch % kChunkCols) + 0..7; lane l takes row +(l >> 3), float4 column +(l & 7), so a warp reads
// four 128-byte row pieces. With a 65-float pitch the shared stores of component j land in banks
// (row + 4 * (l & 7) + j) mod 32: 32 different banks.
// Store: chunk ch covers out rows (tile columns) 4 * (ch / kChunkCols) + 0..3 and out float4s (tile
// row quads) 8 * (ch % kChunkCols) + 0..7; lane l takes out row +(l >> 3), quad +(l & 7), and gathers
// tile[4q + j][cc], j = 0..3, into one float4: banks (4 * (l & 7) + (l >> 3) + j) mod 32, all different.
// A float4 stored covers rows r0 + rl .. + 3 of x, all < rows when r0 + rl < rows (rows % 4 == 0), and
// column c0 + cc, whose float4 was loaded when c0 + cc < cols (cols % 4 == 0): no unloaded value leaks.
__global__ void __launch_bounds__(kThreads)
transpose_vec4_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols, int tiles_c) {
    __shared__ float tile[kVTile][kVTile + TRANSPOSE_PAD];
    const int tr = (int)(blockIdx.x / (unsigned)tiles_c);
    const int tc = (int)(blockIdx.x - (unsigned)tr * (unsigned)tiles_c);
    const int r0 = tr * kVTile, c0 = tc * kVTile;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    float4 v[TRANSPOSE_ITEMS_PER_THREAD];
#pragma unroll
    for (int k = 0; k < TRANSPOSE_ITEMS_PER_THREAD; ++k) {
        const int ch = warp + kWarps * k;
        const int row = 4 * (ch / kChunkCols) + (lane >> 3);
        const int col = 4 * (8 * (ch % kChunkCols) + (lane & 7));
        v[k] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r0 + row < rows && c0 + col < cols)
            v[k] = *reinterpret_cast<const float4*>(x + (int64_t)(r0 + row) * cols + (c0 + col));
    }
#pragma unroll
    for (int k = 0; k < TRANSPOSE_ITEMS_PER_THREAD; ++k) {
        const int ch = warp + kWarps * k;
        const int row = 4 * (ch / kChunkCols) + (lane >> 3);
        const int col = 4 * (8 * (ch % kChunkCols) + (lane & 7));
        tile[row][col + 0] = v[k].x;
        tile[row][col + 1] = v[k].y;
        tile[row][col + 2] = v[k].z;
        tile[row][col + 3] = v[k].w;
    }
    __syncthreads();

#pragma unroll
    for (int k = 0; k < TRANSPOSE_ITEMS_PER_THREAD; ++k) {
        const int ch = warp + kWarps * k;
        const int cc = 4 * (ch / kChunkCols) + (lane >> 3);       // out row c0 + cc
        const int rl = 4 * (8 * (ch % kChunkCols) + (lane & 7));  // out columns r0 + rl .. r0 + rl + 3
        if (c0 + cc < cols && r0 + rl < rows) {
            const float4 w = make_float4(tile[rl][cc], tile[rl + 1][cc], tile[rl + 2][cc], tile[rl + 3][cc]);
            *reinterpret_cast<float4*>(out + (int64_t)(c0 + cc) * rows + (r0 + rl)) = w;
        }
    }
}

extern "C" cudaError_t transpose(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    const bool vec = ((rows | cols) & 3) == 0 &&
                     ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) & 15u) == 0;
    const int t = vec ? kVTile : kTile;
    const int tiles_r = (int)(((int64_t)rows + t - 1) / t);
    const int tiles_c = (int)(((int64_t)cols + t - 1) / t);
    const unsigned grid = (unsigned)((int64_t)tiles_r * tiles_c);
    if (vec)
        transpose_vec4_kernel<<<grid, kThreads, 0, stream>>>(x, out, rows, cols, tiles_c);
    else
        transpose_tile_kernel<<<grid, kThreads, 0, stream>>>(x, out, rows, cols, tiles_c);
    return cudaGetLastError();
}
