// topk expert: values[b, :] = the k largest of x[b, :] in descending order, indices[b, :] their
// columns; fp32 rows of `length`, row-major contiguous, 1 <= k <= length.
//
// The benchmark (64 rows of 4096, k = 512) moves 1.3 MB: a memory-bound kernel would take 0.3 us,
// so the time is latency: one row's chain of dependent steps, each behind a barrier. One block of
// TOPK_BLOCK threads per row does the whole row in shared memory, in four phases:
//   1. staging: the row is copied to shared memory with 16-byte float4 loads (a scalar head up to
//      the row's first 16-byte boundary and a scalar tail; the body lands at position 0, so any
//      base alignment and any length work; col_of() maps a position back to its column). With
//      1024 threads a 4096-float row is one load per thread: one DRAM round trip.
//   2. radix select: floats map to order-preserving unsigned keys; most significant 8-bit digit
//      first, a shared histogram (atomicAdd) of the digit among the elements still matching the
//      chosen prefix, then one warp scans the 256 bins from the top (shuffle scan) and picks the
//      digit holding the k-th element. A pass whose bin is needed whole ends the search early:
//      random rows stop after two or three passes instead of four.
//   3. compaction: elements above the threshold, and as many of those equal to it as are still
//      needed, are packed as (key << 32 | ~column) into a shared candidate buffer through two
//      shared slot counters (nvcc turns these uniform-address atomics into one per warp).
//   4. bitonic sort of the candidates (padded to P = a power of two >= max(k, 32 *
//      TOPK_SORT_PER_THREAD) with zeros, which sort last), descending. Each sorting thread holds
//      TOPK_SORT_PER_THREAD consecutive candidates in registers: strides below that are
//      compare-exchanges inside the thread, strides below 32 times that are __shfl_xor_sync with
//      another lane, and only the larger strides go through shared memory, one barrier each (for
//      k = 512: 5 barriers, against 14 with one candidate per thread). The last register run
//      writes values and indices directly. The packed order breaks ties by the lower column, and
//      all 64-bit numbers of a row are distinct, so the network needs no stability.
// Rows longer than TOPK_SMEM_ELEMS, or k above TOPK_MAX_K, take the fallback kernel: each
// element's rank is counted against the whole row in global memory (O(length^2 / TOPK_BLOCK) per
// thread): correct for any shape, slow, and never on the benchmark path.
// __restrict__ plus a host-computed misalignment (no pointer-to-integer cast in device code) keep
// the staging loads on the read-only path (LDG.E.128.CONSTANT); __launch_bounds__ matches the one
// block size used.
#include <cuda_runtime.h>
#include <stdint.h>

#ifndef TOPK_BLOCK
#define TOPK_BLOCK 1024        // threads per row (a power of two, at least 32)
#endif
#ifndef TOPK_SMEM_ELEMS
#define TOPK_SMEM_ELEMS 8192   // longest row staged in shared memory (32 KB)
#endif
#ifndef TOPK_MAX_K
#define TOPK_MAX_K 1024        // largest k handled in shared memory (8 KB of candidates)
#endif
#ifndef TOPK_SORT_PER_THREAD
#define TOPK_SORT_PER_THREAD 4 // consecutive candidates each sorting thread holds (a power of two)
#endif

static_assert(TOPK_BLOCK >= 32 && (TOPK_BLOCK & (TOPK_BLOCK - 1)) == 0, "TOPK_BLOCK: a power of two >= 32");
static_assert(TOPK_SMEM_ELEMS % 4 == 0, "TOPK_SMEM_ELEMS: a multiple of 4");
static_assert(TOPK_MAX_K >= 32 && (TOPK_MAX_K & (TOPK_MAX_K - 1)) == 0, "TOPK_MAX_K: a power of two >= 32");
static_assert(TOPK_SORT_PER_THREAD >= 1 && (TOPK_SORT_PER_THREAD & (TOPK_SORT_PER_THREAD - 1)) == 0 &&
                  32 * TOPK_SORT_PER_THREAD <= TOPK_MAX_K,
              "TOPK_SORT_PER_THREAD: a power of two with 32 * TOPK_SORT_PER_THREAD <= TOPK_MAX_K");

__device__ __forceinline__ unsigned int float_to_key(float f) {
    unsigned int u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_to_float(unsigned int key) {
    unsigned int u = (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
    return __uint_as_float(u);
}

// key in the high word, the column inverted in the low word: larger is better, and ties of equal
// values go to the lower column.
__device__ __forceinline__ unsigned long long pack(unsigned int key, int col) {
    return ((unsigned long long)key << 32) | (0xffffffffu - (unsigned int)col);
}

__device__ __forceinline__ void write_out(float* values, int* indices, long long at, unsigned long long c) {
    values[at] = key_to_float((unsigned int)(c >> 32));
    indices[at] = (int)(0xffffffffu - (unsigned int)c);
}

// Every row, any length and k: count how many elements of the row beat each element.
__global__ void __launch_bounds__(TOPK_BLOCK)
topk_rank_global_kernel(const float* __restrict__ x, float* __restrict__ values, int* __restrict__ indices,
                        int length, int k) {
    const float* row = x + (long long)blockIdx.x * length;
    const long long out0 = (long long)blockIdx.x * k;
    for (int i = threadIdx.x; i < length; i += blockDim.x) {
        const unsigned long long mine = pack(float_to_key(row[i]), i);
        int rank = 0;
        for (int j = 0; j < length; ++j) rank += pack(float_to_key(row[j]), j) > mine;
        if (rank < k) write_out(values, indices, out0 + rank, mine);
    }
}

// The column of shared position p under the staging layout of topk_radix_kernel.
__device__ __forceinline__ int col_of(int p, int head, int body, int tail0) {
    return p < body ? p + head : (p < tail0 ? p - body : p);
}

// Candidates per sorting thread: TOPK_SORT_PER_THREAD consecutive ones, in RMAX rounds of the
// block (one unless TOPK_MAX_K exceeds TOPK_SORT_PER_THREAD * TOPK_BLOCK). Item
// i = (r * TOPK_BLOCK + tid) * TOPK_SORT_PER_THREAD + e sits in v[r * TOPK_SORT_PER_THREAD + e].
constexpr int SORT_SPAN = TOPK_SORT_PER_THREAD * TOPK_BLOCK;  // items one round of the block holds
constexpr int RMAX = TOPK_MAX_K > SORT_SPAN ? TOPK_MAX_K / SORT_SPAN : 1;

__device__ __forceinline__ int item_of(int r, int tid, int e) {
    return (r * TOPK_BLOCK + tid) * TOPK_SORT_PER_THREAD + e;
}

// In a stage (size, j) item i keeps the larger of itself and item i ^ j when it is the lower of
// the pair in a descending block ((i & size) == 0), or the higher in an ascending one.
__device__ __forceinline__ bool keeps_larger(int i, int size, int j) {
    return ((i & size) == 0) == ((i & j) == 0);
}

// One stage of stride j, TOPK_SORT_PER_THREAD <= j < 32 * TOPK_SORT_PER_THREAD: item i meets item
// i ^ j, held at the same e by lane (tid ^ j / TOPK_SORT_PER_THREAD) of the same warp. Every lane
// of the warp calls it with the same R.
__device__ __forceinline__ void warp_stage(unsigned long long* v, int R, int tid, int size, int j) {
    const int lane_xor = j / TOPK_SORT_PER_THREAD;
    for (int r = 0; r < RMAX; ++r) {
        if (r < R) {
            for (int e = 0; e < TOPK_SORT_PER_THREAD; ++e) {
                unsigned long long& mine = v[r * TOPK_SORT_PER_THREAD + e];
                const unsigned long long other = __shfl_xor_sync(0xffffffffu, mine, lane_xor);
                if (keeps_larger(item_of(r, tid, e), size, j) ? other > mine : other < mine) mine = other;
            }
        }
    }
}

// The stages of stride j < TOPK_SORT_PER_THREAD (and j < size) of one merge, largest first: both
// items of a pair are in this thread. Every loop has a constant trip count, so once unrolled
// every register index is a constant (no local memory).
__device__ __forceinline__ void thread_stages(unsigned long long* v, int R, int tid, int size) {
    for (int j = TOPK_SORT_PER_THREAD / 2; j > 0; j >>= 1) {
        if (j < size) {
            for (int r = 0; r < RMAX; ++r) {
                if (r < R) {
                    for (int e = 0; e < TOPK_SORT_PER_THREAD; ++e) {
                        if ((e & j) == 0) {
                            unsigned long long& lo = v[r * TOPK_SORT_PER_THREAD + e];
                            unsigned long long& hi = v[r * TOPK_SORT_PER_THREAD + (e | j)];
                            const unsigned long long a = lo, b = hi;
                            if ((item_of(r, tid, e) & size) == 0 ? a < b : a > b) {
                                lo = b;
                                hi = a;
                            }
                        }
                    }
                }
            }
        }
    }
}

// The radix select's shared state: the digits chosen so far and how many elements are still needed.
struct RadixState {
    unsigned int prefix;     // chosen high digits, lower bits zero
    unsigned int mask;       // which bits prefix fixes
    unsigned int need;       // elements still to take among those matching prefix (>= 1)
    unsigned int bin_count;  // elements matching the new prefix
    unsigned int n_gt;       // compaction slot counter: elements above the threshold
    unsigned int n_eq;       // compaction slot counter: elements at the threshold
};

// Warp 0 (all 32 lanes): find the digit d of this pass such that fewer than `need` matching
// elements have a higher digit and at least `need` have d or higher; fold it into the state and
// clear the histogram for the next pass. Lane l owns digits 255 - 8l down to 248 - 8l, so an
// inclusive scan over lanes counts from the top digit down.
__device__ __forceinline__ void radix_pick_digit(unsigned int* s_hist, RadixState* st, int lane, int shift,
                                                 unsigned int prefix, unsigned int mask, unsigned int need) {
    const int top = 255 - 8 * lane;
    unsigned int sum = 0;
    for (int j = 0; j < 8; ++j) sum += s_hist[top - j];
    unsigned int incl = sum;
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned int up = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += up;
    }
    const unsigned int excl = incl - sum;
    if (excl < need && need <= incl) {  // exactly one lane: its digits hold the need-th element
        unsigned int before = excl;
        int d = top;
        while (before + s_hist[d] < need) before += s_hist[d--];
        st->prefix = prefix | ((unsigned int)d << shift);
        st->mask = mask | (255u << shift);
        st->need = need - before;
        st->bin_count = s_hist[d];
    }
    for (int j = 0; j < 8; ++j) s_hist[top - j] = 0;  // a lane clears only bins it alone read
}

// Rows of at most TOPK_SMEM_ELEMS and k of at most TOPK_MAX_K, one block per row.
__global__ void __launch_bounds__(TOPK_BLOCK)
topk_radix_kernel(const float* __restrict__ x, float* __restrict__ values, int* __restrict__ indices,
                  int length, int k, int x_mis) {
    __shared__ float4 s_row4[TOPK_SMEM_ELEMS / 4];
    __shared__ unsigned long long s_cand[TOPK_MAX_K];
    __shared__ unsigned int s_hist[256];
    __shared__ RadixState s_st;

    const int tid = threadIdx.x;
    const float* row = x + (long long)blockIdx.x * length;
    const long long out0 = (long long)blockIdx.x * k;
    // Shared layout: positions [0, body) hold columns [head, head + body) (the float4 body),
    // [body, tail0) hold columns [0, head), [tail0, length) hold themselves.
    // x_mis (0-3) is how many floats x sits past a 16-byte boundary; row r starts r * length later.
    const int mis = (int)(((unsigned int)x_mis + blockIdx.x * (unsigned int)length) & 3u);
    const int head = min(length, (4 - mis) & 3);
    const int nvec = (length - head) >> 2;
    const int body = 4 * nvec;
    const int tail0 = head + body;
    const float4* row4 = reinterpret_cast<const float4*>(row + head);
    float* s_row = reinterpret_cast<float*>(s_row4);
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) s_row4[i] = row4[i];
    if (tid < head) s_row[body + tid] = row[tid];
    if (tail0 + tid < length) s_row[tail0 + tid] = row[tail0 + tid];
    for (int b = tid; b < 256; b += TOPK_BLOCK) s_hist[b] = 0;
    if (tid == 0) {
        s_st.n_gt = 0;
        s_st.n_eq = 0;
    }
    __syncthreads();

    // ---- radix select: the k-th largest key, most significant digit first
    unsigned int prefix = 0, mask = 0, need = (unsigned int)k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < length; i += TOPK_BLOCK) {
            const unsigned int key = float_to_key(s_row[i]);
            if ((key & mask) == prefix) atomicAdd(&s_hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid < 32) radix_pick_digit(s_hist, &s_st, tid, shift, prefix, mask, need);
        __syncthreads();
        prefix = s_st.prefix;
        mask = s_st.mask;
        need = s_st.need;
        if (s_st.bin_count == need) break;  // the whole bin is taken: the threshold is found
    }

    // ---- compaction: every element above the threshold, and `need` of those at it
    // Exactly k - need elements have (key & mask) > prefix: the bins above the chosen digit of
    // every pass. They fill slots [0, k - need); the tied ones fill [k - need, k); [k, P) is padding.
    const unsigned int n_gt = (unsigned int)k - need;
    int P = 32 * TOPK_SORT_PER_THREAD;
    while (P < k) P <<= 1;
    for (int i = k + tid; i < P; i += TOPK_BLOCK) s_cand[i] = 0;  // padding: sorts after every element
    for (int i = tid; i < length; i += TOPK_BLOCK) {
        const unsigned int key = float_to_key(s_row[i]);
        const unsigned int high = key & mask;
        if (high > prefix) {
            s_cand[atomicAdd(&s_st.n_gt, 1u)] = pack(key, col_of(i, head, body, tail0));
        } else if (high == prefix) {
            const unsigned int e = atomicAdd(&s_st.n_eq, 1u);
            if (e < need) s_cand[n_gt + e] = pack(key, col_of(i, head, body, tail0));
        }
    }
    __syncthreads();

    // ---- bitonic sort of the P candidates, descending
    // Stage (size, j): item i pairs with i ^ j; blocks of `size` with (i & size) == 0 are ordered
    // descending, the others ascending, so each merge sees a bitonic sequence. At size == P every
    // block is descending. Strides >= 32 * TOPK_SORT_PER_THREAD cross warps: they go through s_cand.
    const int R = P > SORT_SPAN ? P / SORT_SPAN : 1;  // rounds per holding thread
    const bool holder = tid < P / TOPK_SORT_PER_THREAD;  // whole warps: P / TOPK_SORT_PER_THREAD >= 32
    unsigned long long v[RMAX * TOPK_SORT_PER_THREAD];
    if (holder) {
        for (int r = 0; r < RMAX; ++r)
            for (int e = 0; e < TOPK_SORT_PER_THREAD; ++e)
                if (r < R) v[r * TOPK_SORT_PER_THREAD + e] = s_cand[item_of(r, tid, e)];
        for (int size = 2; size <= 32 * TOPK_SORT_PER_THREAD; size <<= 1) {
            for (int j = size >> 1; j >= TOPK_SORT_PER_THREAD; j >>= 1) warp_stage(v, R, tid, size, j);
            thread_stages(v, R, tid, size);
        }
    }
    for (int size = 64 * TOPK_SORT_PER_THREAD; size <= P; size <<= 1) {
        if (holder)
            for (int r = 0; r < RMAX; ++r)
                for (int e = 0; e < TOPK_SORT_PER_THREAD; ++e)
                    if (r < R) s_cand[item_of(r, tid, e)] = v[r * TOPK_SORT_PER_THREAD + e];
        __syncthreads();
        for (int j = size >> 1; j >= 32 * TOPK_SORT_PER_THREAD; j >>= 1) {
            for (int q = tid; q < (P >> 1); q += TOPK_BLOCK) {
                const int i = ((q & ~(j - 1)) << 1) | (q & (j - 1));
                const unsigned long long a = s_cand[i], b = s_cand[i + j];
                const bool desc = (i & size) == 0;
                if (desc ? a < b : a > b) {
                    s_cand[i] = b;
                    s_cand[i + j] = a;
                }
            }
            __syncthreads();
        }
        if (holder) {
            for (int r = 0; r < RMAX; ++r)
                for (int e = 0; e < TOPK_SORT_PER_THREAD; ++e)
                    if (r < R) v[r * TOPK_SORT_PER_THREAD + e] = s_cand[item_of(r, tid, e)];
            for (int j = 16 * TOPK_SORT_PER_THREAD; j >= TOPK_SORT_PER_THREAD; j >>= 1)
                warp_stage(v, R, tid, size, j);
            thread_stages(v, R, tid, size);
        }
    }
    if (holder)
        for (int r = 0; r < RMAX; ++r)
            for (int e = 0; e < TOPK_SORT_PER_THREAD; ++e) {
                const int i = item_of(r, tid, e);
                if (r < R && i < k) write_out(values, indices, out0 + i, v[r * TOPK_SORT_PER_THREAD + e]);
            }
}

extern "C" cudaError_t topk(const float* x, float* values, int* indices, int batch, int length, int k, cudaStream_t stream) {
    // The misalignment of x is read here, on the host: a pointer cast to an integer in device code
    // would stop the compiler from treating x as read-only.
    const int x_mis = (int)(((uintptr_t)x >> 2) & 3u);
    if (length <= TOPK_SMEM_ELEMS && k <= TOPK_MAX_K)
        topk_radix_kernel<<<batch, TOPK_BLOCK, 0, stream>>>(x, values, indices, length, k, x_mis);
    else
        topk_rank_global_kernel<<<batch, TOPK_BLOCK, 0, stream>>>(x, values, indices, length, k);
    return cudaGetLastError();
}
