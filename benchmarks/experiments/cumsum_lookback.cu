// EXPERIMENT (not the expert; the lead decides whether to promote it): cumsum expert.cu with the
// two-launch reduce-then-scan for few long rows (1 x 1048576) replaced by a single-launch,
// single-pass scan. Timed against expert.cu, torch.cumsum and a same-size copy by
// benchmarks/cumsum_lookback_h200.py.
//
// cumsum: inclusive prefix sum along each row, out[r, c] = sum_{j <= c} x[r, j], fp32, x and out
// row-major contiguous; out may be x itself (an in-place call); either base may sit 4, 8 or 12 bytes
// past a 16-byte boundary.
//
// Paths, picked on the host from the shape:
//   * cols <= CUMSUM_WARP_MAX_COLS: one warp per row -- expert.cu's kernel, byte for byte, so
//     16384 x 4096 runs exactly what the expert runs.
//   * longer rows, at least CUMSUM_TARGET_CTAS of them: one block per row (expert.cu's block scan,
//     made safe for in-place calls: see cumsum_block_kernel).
//   * longer rows, fewer of them (1 x 1M, 2 x 65537, 1 x 300001, ...): THE NEW PATH,
//     cumsum_onepass_kernel. One cooperative launch: each row is split into `split` tiles, one block
//     per tile, every tile small enough to stay in registers, every block resident. A row too long
//     for that (more than about capacity x 4096 floats, ~1-2M floats per row on an H200) is cut into
//     equal segments, one such launch each, each segment starting from the previous one's last
//     output, when there are fewer rows than half the SMs; otherwise, and without cooperative
//     launch support, one block per row.
//
// ================================ the one-launch path: design ================================
// Goal: one read of x and one write of out (8 bytes/element), one launch, no host-side state, no
// scratch memory, deterministic. The tile of block (row r, tile p) is loaded once into registers
// with 16-byte loads, its aggregate is handed to every later tile of the row, and the block writes
// its tile once it knows the sum of all earlier tiles.
//
// 1. Why not a classic decoupled look-back (tile id from an atomic ticket, status words that move
//    from EMPTY to AGGREGATE to PREFIX, predecessors polled by each tile). It needs memory in a
//    KNOWN state at launch: a zeroed ticket counter and EMPTY status words. The ABI gives none (x,
//    out, rows, cols, stream), and the guard forbids allocating (cudaMalloc*), static/global/
//    __device__ state between calls, and host-side counters or clocks (so no per-call epoch). `out`
//    holds arbitrary bytes on entry (NaN-poisoned by the gate, the previous call's result, or x
//    itself in an in-place call), and no encoding makes a status word unforgeable by arbitrary
//    bytes: an execution in which the predecessor has not run yet but its status word happens to
//    hold "PREFIX, v" is indistinguishable from one where it has. Deterministically, a block can
//    only trust words written in THIS launch after it knows they were cleared in this launch. A
//    cudaMemsetAsync before the kernel is a second stream operation (the launch gap this design is
//    meant to remove) and cannot clear anything in an in-place call without destroying x.
//
// 2. The one source of known-state memory a launch may legally use: the driver's grid workspace of a
//    COOPERATIVE launch (cudaLaunchCooperativeKernel; cooperative_groups::this_grid()). The driver
//    sets it up per launch; its grid barrier is what lets a kernel initialise memory race-free.
//    A cooperative launch also guarantees that every block of the grid is resident at once, so
//    blocks may wait on each other without an atomic ticket: with every block running, no block
//    can wait on one that is not scheduled (blockIdx order = tile order, and no deadlock). The host
//    sizes the grid from the occupancy calculator (cudaLaunchCooperativeKernel refuses an oversized
//    grid) and cuts rows that need more tiles than fit into segments (one launch each).
//
// 3. Storage for the hand-over: the "slot array" of tile q is q 8-byte words at the start of tile
//    q's OWN output region (first 8-byte-aligned address of its body in `out`). Slot word p of tile
//    q holds (flag = 1 in the high 32 bits | aggregate of tile p as float bits in the low 32), so
//    value and flag travel in one 64-bit store that is single-copy atomic (st.relaxed.gpu.b64)
//    and a reader sees either the cleared word (flag 0) or the whole published word.
//    Push, not pull: tile p writes its aggregate into slot p of every later tile q of its row (at
//    most split-1 8-byte stores per block, one per thread), and each tile polls only its own slot
//    array. A pull look-back (each tile publishing one status word in its own region, successors
//    reading it) cannot work without a second grid barrier: a tile's status word sits inside its
//    output, and the tile would overwrite it while a successor may still be reading it. With push,
//    tile q's region is written by foreign blocks only in its slot words, each exactly once, and
//    tile q itself overwrites them only after it has seen all q of them published, so no write
//    races a read. Polling the whole slot array at once (one 8-byte word per thread) also costs
//    one L2 round trip where a look-back that walks back 32 tiles per step costs q/32 of them.
//    The tile's prefix is the sum of its q slot values in a fixed order (per-thread, then a fixed
//    block reduction): the result does not depend on timing (bitwise reproducible), unlike a
//    look-back that stops at the first PREFIX it meets.
//
// 4. Order of one block (tile p of row r):
//      a. issue the 16-byte loads of its body tile (at most BLOCK*VPT float4s, VPT per thread),
//         plus the scalar head (tile 0) and tail (last tile), all into registers;
//      b. clear its own slot array (p words) -- each slot word is cleared by the thread that
//         loaded that address, after the load in program order (see in-place, below);
//      c. grid barrier ARRIVE (cooperative_groups split barrier: bar.sync, then one release
//         atomic per block). The loads are still in flight: the barrier's latency overlaps the
//         DRAM latency, it is not added to it;
//      d. scan the tile in registers (serial float4 scan, warp shuffle scan, warp totals through
//         shared memory) -> per-thread offsets inside the tile, and the tile aggregate;
//      e. grid barrier WAIT: every slot array of the grid is now cleared, so pushes cannot be
//         erased by a late clear;
//      f. push the aggregate into slot p of every later tile of the row (st.relaxed.gpu.b64);
//      g. poll its own p slot words (ld.relaxed.gpu.b64, bypassing L1, which may hold stale lines
//         of x in an in-place call) until every flag is set; prefix = fixed-order sum;
//      h. write the tile (16-byte stores when out shares x's 16-byte phase), the head, the tail.
//    The critical path after the loads land is one block scan, one push (store to L2) and one poll
//    (load from L2): about two L2 round trips, against a whole second launch for reduce-then-scan.
//
// 5. In-place (out == x). Tile q's x is overwritten only by (i) block q's own clear of its slot
//    words, (ii) foreign pushes into those slot words, (iii) block q's final stores.
//    (i): a thread clears only addresses it loaded itself, after the load in program order; the
//    PTX memory model orders a load and a later store to the same address by the same thread (the
//    load cannot see the store), and no `__restrict__` is used on this kernel's pointers, so the
//    compiler cannot move the store above the load. (ii): a push into tile q happens after the
//    pusher's grid-barrier wait, which happens after tile q's arrive, which follows (in causality
//    order: bar.sync, then the release atomic) tile q's clear of that word, which follows tile q's
//    load of it; so the load cannot see the push. (iii): every load of tile q (body, head, tail) by
//    any warp of block q precedes the arrive's bar.sync, which "performs" them with respect to the
//    block before any thread passes it; all stores come after the wait. No other block reads or
//    writes tile q's x. (When out and x have different 16-byte phases they are different buffers,
//    so out != x and the slot words are cleared by any thread.)
//    (expert.cu is not in-place safe on its long-row paths: its two-launch pass 1 writes tile sums
//    into later tiles' first elements, which in an in-place call are those tiles' inputs, and pass
//    2 then reads them as x; its block kernel lets warp 0 store the scalar head and tail while other
//    warps may not have read them yet. This file's block kernel is fixed, see below.)
//
// 6. Misaligned bases. Every row is split as in expert.cu: a scalar head up to x's next 16-byte
//    boundary (0..3 elements, scanned by lanes, part of tile 0), float4 body split over the tiles,
//    scalar tail (0..3 elements, part of the last tile). Loads of the body are always aligned 16-byte
//    loads of x; stores are float4 when out has x's phase (VEC_STORE), else 4 scalar stores. The
//    slot array starts at the first 8-byte-aligned address of the tile's body in out (the body base
//    itself when VEC_STORE); tile sizes keep 8*(split-1)+4 bytes <= a tile's bytes, so it fits.
//
// 7. Memory-model notes. Pushes and polls are strong (relaxed, gpu scope) 64-bit accesses to the
//    same aligned words, so a poll sees either 0 or the full published word. The final store of
//    a slot address by block q is issued after q observed the push there (a poll returned it, then
//    a __syncthreads): L2 is the point of coherence for both and the push had already reached it.
//    The grid barrier is cooperative_groups' own (documented to order all memory operations before
//    it with those after it, grid-wide).
//
// Cost model at 1 x 1M (264 tiles of ~993 float4, 256 threads x 4 float4 each): the whole 4 MB is
// requested at once (like a copy's loads), the barrier hides under that, then ~2 L2 round trips
// (~1 us), then the 4 MB of stores. One launch instead of two; the slot traffic is
// 264*263/2 = 34.7K 8-byte stores, 138 KB spread over all L2 slices.
// =============================================================================================
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace cg = cooperative_groups;

// ---- tuning constants (override with -DNAME=value) ----
#ifndef CUMSUM_WARP_MAX_COLS
#define CUMSUM_WARP_MAX_COLS 8192    // rows up to this width get one warp each
#endif
#ifndef CUMSUM_WARP_BLOCK
#define CUMSUM_WARP_BLOCK 256        // threads per block on the warp-per-row path (8 rows/block)
#endif
#ifndef CUMSUM_WARP_UNROLL
#define CUMSUM_WARP_UNROLL 8         // float4 per lane per step on the warp path (1024 floats)
#endif
#ifndef CUMSUM_BLOCK
#define CUMSUM_BLOCK 256             // threads per block on the one-block-per-row path
#endif
#ifndef CUMSUM_UNROLL
#define CUMSUM_UNROLL 4              // float4 per thread per step on the block path (4096 floats)
#endif
#ifndef CUMSUM_TARGET_CTAS
#define CUMSUM_TARGET_CTAS 264       // rows at least this many: one block per row (no split)
#endif
// the one-launch path
#ifndef CUMSUM_OP_BLOCK
#define CUMSUM_OP_BLOCK 256          // threads per tile block
#endif
#ifndef CUMSUM_OP_VPT
#define CUMSUM_OP_VPT 4              // float4 per thread: a tile holds at most OP_BLOCK*OP_VPT float4
#endif
#ifndef CUMSUM_OP_CTAS_PER_SM
#define CUMSUM_OP_CTAS_PER_SM 2      // tiles aimed at per SM (more if the row needs them to fit)
#endif
#ifndef CUMSUM_OP_MIN_TILE_VECS
#define CUMSUM_OP_MIN_TILE_VECS 256  // float4 per tile at least (short rows use fewer tiles)
#endif
#ifndef CUMSUM_OP_SPIN_LIMIT
#define CUMSUM_OP_SPIN_LIMIT (1u << 22)  // polls of one slot word (~1 s) before the kernel traps (a bug)
#endif

static_assert(CUMSUM_WARP_BLOCK % 32 == 0 && CUMSUM_BLOCK % 32 == 0 && CUMSUM_OP_BLOCK % 32 == 0,
              "block sizes: whole warps");
static_assert(CUMSUM_OP_VPT >= 1 && CUMSUM_OP_MIN_TILE_VECS >= 1, "one-launch tile sizes");

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

// A float4 store when out shares x's 16-byte phase, else four scalar stores.
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
// return the carry after them. Used for the scalar head and tail on the warp path (one warp per
// row: each lane writes only the element it loaded itself, so in-place calls are safe).
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

// ---------------- rows up to CUMSUM_WARP_MAX_COLS: one warp per row (expert.cu) ----------------
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

// ---------------- block-wide pieces ----------------
// Sum of one value per thread over the block, the same in every thread (fixed order). Uses its
// own shared array once per kernel; contains a __syncthreads every thread must reach.
template <int BLOCK>
__device__ __forceinline__ float block_total(float v, float* s_red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_incl_scan(v, lane);
    if (lane == 31) s_red[warp] = v;
    __syncthreads();
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < BLOCK / 32; ++w) t += s_red[w];
    return t;
}

// Block scan of float4s [vb, ve) of xv into ov (same indexing), starting from `carry` (the same in
// every thread); returns the carry after them, the same in every thread (expert.cu's, without
// __restrict__: xv and ov are the same memory in an in-place call).
template <int BLOCK, int UNROLL, bool VEC_STORE>
__device__ __forceinline__ float block_scan_range(const float4* xv, float4* ov,
                                                  int vb, int ve, float carry,
                                                  float (*s_tot)[UNROLL][BLOCK / 32]) {
    constexpr int NW = BLOCK / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int buf = 0;
    for (int c = vb; c < ve; c += BLOCK * UNROLL) {
        float4 v[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            const int i = c + k * BLOCK + (int)threadIdx.x;
            v[k] = i < ve ? xv[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        float incl[UNROLL], own[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            own[k] = scan4(v[k]);
            incl[k] = warp_incl_scan(own[k], lane);
            if (lane == 31) s_tot[buf][k][warp] = incl[k];
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            float before = 0.f, total = 0.f;  // warps before this one in slice k; whole slice k
#pragma unroll
            for (int w = 0; w < NW; ++w) {
                const float t = s_tot[buf][k][w];
                if (w < warp) before += t;
                total += t;
            }
            const int i = c + k * BLOCK + (int)threadIdx.x;
            if (i < ve) store4<VEC_STORE>(ov + i, add4(v[k], (carry + before) + (incl[k] - own[k])));
            carry += total;
        }
        buf ^= 1;
    }
    return carry;
}

// Vector range [vb, ve) of tile p of `split` (balanced: sizes differ by at most one vector).
__device__ __forceinline__ void tile_range(int nvec, int p, int split, int& vb, int& ve) {
    vb = (int)(((int64_t)p * nvec) / split);
    ve = (int)(((int64_t)(p + 1) * nvec) / split);
}

// ---------------- long rows, many of them: one block per row ----------------
// expert.cu's block kernel at split == 1, with two changes for in-place calls (out == x): no
// __restrict__ (it promises the compiler that x and out never overlap, which lets it sink a load of
// x below a store to out), and the scalar head and tail are read into registers by every warp
// before a __syncthreads that precedes every store. expert.cu lets warp 0 store the head inside
// scan_piece while another warp of the block may not have loaded it yet, and store the tail while
// another warp may still be loading it; with out == x that warp reads an output instead of an
// input. (The lineage prober's aliased_output probes run 600 x 8193 in place: rows that start 4, 8
// or 12 bytes past a 16-byte boundary, so they have scalar heads and tails, on this kernel.)
template <int BLOCK, int UNROLL, bool VEC_STORE>
__global__ void __launch_bounds__(BLOCK)
cumsum_block_kernel(const float* x, float* out, int rows, int cols) {
    __shared__ float s_tot[2][UNROLL][BLOCK / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t r = blockIdx.x;
    const float* xr = x + r * (int64_t)cols;
    float* orow = out + r * (int64_t)cols;
    const RowSplit s = split_row(xr, cols);
    const int tail = cols - s.tail0;
    const float hv = lane < s.head ? xr[lane] : 0.f;          // every warp
    const float tv = lane < tail ? xr[s.tail0 + lane] : 0.f;  // every warp
    const float hi = warp_incl_scan(hv, lane);
    __syncthreads();  // every warp has read the head and the tail before any store
    if (warp == 0 && lane < s.head) orow[lane] = hi;
    float carry = __shfl_sync(FULL_MASK, hi, 31);

    carry = block_scan_range<BLOCK, UNROLL, VEC_STORE>(reinterpret_cast<const float4*>(xr + s.head),
                                                       reinterpret_cast<float4*>(orow + s.head),
                                                       0, s.nvec, carry, s_tot);

    const float ti = warp_incl_scan(tv, lane);
    if (warp == 0 && lane < tail) orow[s.tail0 + lane] = carry + ti;
}

// ================ few long rows: one launch (cooperative), tiles in registers ================
// Strong (relaxed, gpu-scope) 64-bit accesses to slot words: never served from a stale L1 line,
// single-copy atomic. The "memory" clobber keeps the compiler from moving other memory accesses
// across them.
__device__ __forceinline__ void slot_publish(unsigned long long* a, unsigned long long v) {
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(a), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned long long slot_read(const unsigned long long* a) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(a) : "memory");
    return v;
}

// Slot array of a tile: the first 8-byte-aligned address at or after its body's first element in out.
__device__ __forceinline__ unsigned long long* slot_array(float* obody) {
    return reinterpret_cast<unsigned long long*>(((uintptr_t)obody + 7u) & ~(uintptr_t)7u);
}

// One block per tile p of columns [c0, c0 + len) of row r; grid = rows * split, all resident
// (cooperative launch). Normally c0 = 0 and len = cols: the whole row in one launch. Rows too long
// for one resident grid are cut into segments, one launch each, in stream order; segment k's tile 0
// starts from out[r, c0 - 1], the final output of the previous launch. The host guarantees: every
// tile has 1..BLOCK*VPT body float4s (or split == 1), and 8*(split-1)+4 bytes fit in the smallest
// tile's body. No __restrict__: in an in-place call x and out are the same memory (see 5. above).
template <int BLOCK, int VPT, bool VEC_STORE>
__global__ void __launch_bounds__(BLOCK, CUMSUM_OP_CTAS_PER_SM)
cumsum_onepass_kernel(const float* x, float* out, int rows, int cols, int split, int c0, int len) {
    constexpr int NW = BLOCK / 32;
    __shared__ float s_tot[VPT][NW];
    __shared__ float s_red[NW];
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t r = blockIdx.x / split;
    const int p = (int)(blockIdx.x % split);
    const float* xr = x + r * (int64_t)cols + c0;  // this segment of the row, `len` elements
    float* orow = out + r * (int64_t)cols + c0;
    const RowSplit s = split_row(xr, len);
    int vb, ve;
    tile_range(s.nvec, p, split, vb, ve);
    const int tail = len - s.tail0;
    const bool first = p == 0, last = p == split - 1;

    // a. every load of this tile, issued before anything else (16-byte loads of the body; the
    //    scalar head and tail are loaded by every warp, lanes < n, so each warp can scan them).
    const float4* xv = reinterpret_cast<const float4*>(xr + s.head) + vb;
    const int nv = ve - vb;
    float4 v[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int i = k * BLOCK + tid;
        v[k] = i < nv ? xv[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    const float hv = (first && lane < s.head) ? xr[lane] : 0.f;
    const float tv = (last && lane < tail) ? xr[s.tail0 + lane] : 0.f;
    // the running sum before this segment: the last output of the previous launch (0 when c0 == 0)
    const float base = (first && c0 > 0) ? orow[-1] : 0.f;

    // b. clear this tile's p slot words (tile 0 has none). With VEC_STORE (always so in-place),
    //    the slot array starts at the body base and word j lies in body float4 j/2, so the thread
    //    that loaded float4 i clears it whole (zeros in non-slot floats are overwritten in h.).
    float* obody = orow + s.head + 4 * (int64_t)vb;
    unsigned long long* slots = slot_array(obody);
    if (p > 0) {
        if (VEC_STORE) {
            const int nclear = (p + 1) >> 1;  // float4s that hold words 0..p-1 (<= nv: host check)
            float4* ob4 = reinterpret_cast<float4*>(obody);
#pragma unroll
            for (int k = 0; k < VPT; ++k) {
                const int i = k * BLOCK + tid;
                if (i < nclear) ob4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
            }
        } else {
            // out has another 16-byte phase than x, so out != x: any thread may clear any word.
            for (int j = tid; j < p; j += BLOCK) slots[j] = 0ull;
        }
    }

    // c. arrive at the grid barrier while the loads are in flight.
    cg::grid_group grid = cg::this_grid();
    cg::grid_group::arrival_token token = grid.barrier_arrive();

    // d. block scan of the tile in registers: slice k = float4s [k*BLOCK, (k+1)*BLOCK) of the tile.
    float own[VPT], incl[VPT], offs[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        own[k] = scan4(v[k]);
        incl[k] = warp_incl_scan(own[k], lane);
        if (lane == 31) s_tot[k][warp] = incl[k];
    }
    const float hincl = warp_incl_scan(hv, lane);                  // head, inclusive (0 beyond it)
    const float htot = base + __shfl_sync(FULL_MASK, hincl, 31);   // 0 unless tile 0 of its row
    __syncthreads();
    float body = 0.f;  // whole body of the tile, the same in every thread
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        float before = 0.f, total = 0.f;
#pragma unroll
        for (int w = 0; w < NW; ++w) {
            const float t = s_tot[k][w];
            if (w < warp) before += t;
            total += t;
        }
        offs[k] = body + before;
        body += total;
    }
    const float agg = htot + body;  // this tile's aggregate (head and carry-in included; no tail)

    // e. every slot array of the grid is cleared from here on.
    grid.barrier_wait(static_cast<cg::grid_group::arrival_token&&>(token));

    // f. push the aggregate into slot p of every later tile q of this row.
    if (!last) {
        const unsigned long long word =
            (1ull << 32) | (unsigned long long)__float_as_uint(agg);
        for (int q = p + 1 + tid; q < split; q += BLOCK) {
            int qb, qe;
            tile_range(s.nvec, q, split, qb, qe);
            slot_publish(slot_array(orow + s.head + 4 * (int64_t)qb) + p, word);
        }
    }

    // g. wait for the aggregates of tiles 0..p-1; prefix = their fixed-order sum. A slot that
    //    never arrives (a bug, never a legal state) traps after CUMSUM_OP_SPIN_LIMIT polls, so a
    //    broken build fails with a launch error instead of hanging the device.
    float prefix = 0.f;
    if (p > 0) {
        float part = 0.f;
        for (int j = tid; j < p; j += BLOCK) {
            unsigned long long w = slot_read(slots + j);
            for (unsigned spins = 0; (w >> 32) == 0ull; ++spins) {
                if (spins > CUMSUM_OP_SPIN_LIMIT) asm volatile("trap;");
                w = slot_read(slots + j);
            }
            part += __uint_as_float((unsigned)w);
        }
        prefix = block_total<BLOCK>(part, s_red);  // its __syncthreads: all polls done before h.
    }

    // h. write the tile: head (tile 0), body, tail (last tile).
    if (first && warp == 0 && lane < s.head) orow[lane] = base + hincl;
    const float carry = prefix + htot;
    float4* ov = reinterpret_cast<float4*>(obody);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int i = k * BLOCK + tid;
        if (i < nv) store4<VEC_STORE>(ov + i, add4(v[k], (carry + offs[k]) + (incl[k] - own[k])));
    }
    if (last && tail > 0) {
        const float ti = warp_incl_scan(tv, lane);
        if (warp == 0 && lane < tail) orow[s.tail0 + lane] = (carry + body) + ti;
    }
}

// Host: tiles per row for `len` columns of `rows` rows in one resident grid of at most `capacity`
// blocks, or 0 when that cannot be done (the row needs more tiles than fit, or a slot array would
// not fit in a tile). 1 is returned only when one tile holds the whole segment.
inline int onepass_split(int rows, int64_t len, int sms, int capacity) {
    constexpr int64_t tile_cap = (int64_t)CUMSUM_OP_BLOCK * CUMSUM_OP_VPT;  // float4s a tile holds
    const int64_t min_nvec = len >= 3 ? (len - 3) / 4 : 0;  // body float4s with the longest head
    const int64_t max_nvec = len / 4;                        // ... with no head
    const int64_t need = (max_nvec + tile_cap - 1) / tile_cap;  // tiles for the body to fit registers
    if (capacity < 1 || (int64_t)rows * (need > 1 ? need : 1) > capacity) return 0;
    if (need <= 1 && min_nvec < 2 * CUMSUM_OP_MIN_TILE_VECS) return 1;
    const int64_t target = (int64_t)sms * CUMSUM_OP_CTAS_PER_SM;
    int64_t split = (target + rows - 1) / rows;
    const int64_t by_work = min_nvec / CUMSUM_OP_MIN_TILE_VECS;
    if (split > by_work) split = by_work;
    if (split > capacity / rows) split = capacity / rows;
    if (split < need) split = need;
    if (split < 1) split = 1;
    if ((int64_t)rows * split > capacity) return 0;                 // not all resident
    if (split > 1 && split > min_nvec) return 0;                    // an empty tile
    if (split > 1 && 16 * (min_nvec / split) < 8 * (split - 1) + 4) return 0;  // slots do not fit
    return (int)split;
}

template <bool VEC_STORE>
cudaError_t launch_onepass(const float* x, float* out, int rows, int cols, cudaStream_t stream,
                           bool& launched) {
    launched = false;
    auto kernel = cumsum_onepass_kernel<CUMSUM_OP_BLOCK, CUMSUM_OP_VPT, VEC_STORE>;
    int dev = 0, sms = 0, per_sm = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return err;
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, CUMSUM_OP_BLOCK, 0);
    if (err != cudaSuccess) return err;
    const int capacity = per_sm * sms;
    if (capacity < rows) return cudaSuccess;

    // Segments: the whole row when its tiles fit one resident grid, else the fewest equal segments
    // that do (each segment at most (capacity / rows) full tiles, less 3 floats of head) -- but only
    // for fewer rows than half the SMs: from there on one block per row keeps the GPU busy in one
    // launch, where segments would cost a launch each.
    int64_t nseg = 1;
    int split = onepass_split(rows, cols, sms, capacity);
    if (split == 1) return cudaSuccess;  // one tile per row: the block kernel does the same
    if (split == 0) {
        if (2 * rows >= sms) return cudaSuccess;
        const int64_t seg_max = (int64_t)(capacity / rows) * CUMSUM_OP_BLOCK * CUMSUM_OP_VPT * 4 - 3;
        if (seg_max < 4 * CUMSUM_OP_MIN_TILE_VECS) return cudaSuccess;
        nseg = ((int64_t)cols + seg_max - 1) / seg_max;
    }
    const int64_t seg_len = ((int64_t)cols + nseg - 1) / nseg;
    for (int64_t k = 0; k < nseg; ++k) {
        const int c0 = (int)(k * seg_len);
        int len = (int)(((int64_t)cols - c0) < seg_len ? ((int64_t)cols - c0) : seg_len);
        if (nseg > 1) split = onepass_split(rows, len, sms, capacity);
        if (split == 0) {
            // Cannot happen for the segment lengths above; if it did after launches were made, the
            // remaining columns would be missing, so report it rather than return a partial result.
            if (k > 0) return cudaErrorInvalidValue;
            return cudaSuccess;
        }
        const unsigned grid = (unsigned)((int64_t)rows * split);
        int c0v = c0;
        void* args[] = {(void*)&x, (void*)&out, (void*)&rows, (void*)&cols, (void*)&split,
                        (void*)&c0v, (void*)&len};
        err = cudaLaunchCooperativeKernel((const void*)kernel, dim3(grid), dim3(CUMSUM_OP_BLOCK), args,
                                          0, stream);
        if (k == 0 && (err == cudaErrorCooperativeLaunchTooLarge || err == cudaErrorNotSupported)) {
            (void)cudaGetLastError();  // not all resident, or no cooperative launch: the block kernel
            return cudaSuccess;
        }
        if (err != cudaSuccess) return err;
        launched = true;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t cumsum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    // x and out rows advance in step, so one test says whether float4 stores line up with the
    // 16-byte-aligned float4 loads of x in every row.
    const bool vec_store = ((((uintptr_t)x) ^ ((uintptr_t)out)) & 15u) == 0;

    if (cols <= CUMSUM_WARP_MAX_COLS) {
        constexpr int rows_per_block = CUMSUM_WARP_BLOCK / 32;
        const unsigned grid = (unsigned)(((int64_t)rows + rows_per_block - 1) / rows_per_block);
        auto kernel = vec_store ? cumsum_warp_kernel<CUMSUM_WARP_BLOCK, CUMSUM_WARP_UNROLL, true>
                                : cumsum_warp_kernel<CUMSUM_WARP_BLOCK, CUMSUM_WARP_UNROLL, false>;
        kernel<<<grid, CUMSUM_WARP_BLOCK, 0, stream>>>(x, out, rows, cols);
        return cudaGetLastError();
    }

    // Few long rows: the one-launch path (one cooperative launch per segment; one segment unless a
    // row is too long for every tile of it to stay resident in registers).
    if (rows < CUMSUM_TARGET_CTAS) {
        bool launched = false;
        const cudaError_t err = vec_store ? launch_onepass<true>(x, out, rows, cols, stream, launched)
                                          : launch_onepass<false>(x, out, rows, cols, stream, launched);
        if (err != cudaSuccess || launched) return err;
    }

    // Many long rows (or no cooperative launch): one block per row.
    auto kernel = vec_store ? cumsum_block_kernel<CUMSUM_BLOCK, CUMSUM_UNROLL, true>
                            : cumsum_block_kernel<CUMSUM_BLOCK, CUMSUM_UNROLL, false>;
    kernel<<<(unsigned)rows, CUMSUM_BLOCK, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
