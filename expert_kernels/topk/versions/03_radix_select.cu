// klineage-step: mechanism=radix_select
// The k-th largest key is found by a most-significant-digit radix select over the staged row.
//
// Four passes of 8-bit digits at most: a shared-memory histogram of the digit among the elements
// that still match the chosen prefix, then one warp scans the 256 bins from the top to find the
// digit holding the k-th element. A pass that finds the needed count equal to its bin's count
// stops the search early (random rows stop after two or three passes). The elements above the
// threshold, and as many tied with it as are needed, are then compacted into a shared candidate
// buffer with atomic slot counters, and only those k candidates are ranked by counting:
// O(length + k^2 / block) instead of O(length^2 / block). Rows longer than TOPK_SMEM_ELEMS or k
// above TOPK_MAX_K take the global-memory ranking kernel.
#include <cuda_runtime.h>

#ifndef TOPK_BLOCK
#define TOPK_BLOCK 1024        // threads per row (a power of two, at least 32)
#endif
#ifndef TOPK_SMEM_ELEMS
#define TOPK_SMEM_ELEMS 8192   // longest row staged in shared memory (32 KB)
#endif
#ifndef TOPK_MAX_K
#define TOPK_MAX_K 1024        // largest k handled in shared memory (8 KB of candidates)
#endif

static_assert(TOPK_BLOCK >= 32 && (TOPK_BLOCK & (TOPK_BLOCK - 1)) == 0, "TOPK_BLOCK: a power of two >= 32");
static_assert(TOPK_MAX_K >= 32 && (TOPK_MAX_K & (TOPK_MAX_K - 1)) == 0, "TOPK_MAX_K: a power of two >= 32");

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
__global__ void topk_rank_global_kernel(const float* x, float* values, int* indices, int length, int k) {
    const float* row = x + (long long)blockIdx.x * length;
    const long long out0 = (long long)blockIdx.x * k;
    for (int i = threadIdx.x; i < length; i += blockDim.x) {
        const unsigned long long mine = pack(float_to_key(row[i]), i);
        int rank = 0;
        for (int j = 0; j < length; ++j) rank += pack(float_to_key(row[j]), j) > mine;
        if (rank < k) write_out(values, indices, out0 + rank, mine);
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
__global__ void topk_radix_kernel(const float* x, float* values, int* indices, int length, int k) {
    __shared__ float s_row[TOPK_SMEM_ELEMS];
    __shared__ unsigned long long s_cand[TOPK_MAX_K];
    __shared__ unsigned int s_hist[256];
    __shared__ RadixState s_st;

    const int tid = threadIdx.x;
    const float* row = x + (long long)blockIdx.x * length;
    const long long out0 = (long long)blockIdx.x * k;
    for (int i = threadIdx.x; i < length; i += blockDim.x) s_row[i] = row[i];
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
    // every pass. They fill slots [0, k - need); the tied ones fill [k - need, k).
    const unsigned int n_gt = (unsigned int)k - need;
    for (int i = tid; i < length; i += TOPK_BLOCK) {
        const unsigned int key = float_to_key(s_row[i]);
        const unsigned int high = key & mask;
        if (high > prefix) {
            s_cand[atomicAdd(&s_st.n_gt, 1u)] = pack(key, i);
        } else if (high == prefix) {
            const unsigned int e = atomicAdd(&s_st.n_eq, 1u);
            if (e < need) s_cand[n_gt + e] = pack(key, i);
        }
    }
    __syncthreads();

    // ---- order the k candidates: rank each by counting the candidates that beat it
    for (int c = tid; c < k; c += TOPK_BLOCK) {
        const unsigned long long mine = s_cand[c];
        int rank = 0;
        for (int j = 0; j < k; ++j) rank += s_cand[j] > mine;
        write_out(values, indices, out0 + rank, mine);
    }
}

extern "C" cudaError_t topk(const float* x, float* values, int* indices, int batch, int length, int k, cudaStream_t stream) {
    if (length <= TOPK_SMEM_ELEMS && k <= TOPK_MAX_K)
        topk_radix_kernel<<<batch, TOPK_BLOCK, 0, stream>>>(x, values, indices, length, k);
    else
        topk_rank_global_kernel<<<batch, TOPK_BLOCK, 0, stream>>>(x, values, indices, length, k);
    return cudaGetLastError();
}
