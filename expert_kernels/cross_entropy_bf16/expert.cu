// cross_entropy_bf16 expert: loss[b] = logsumexp(logits[b, :]) - logits[b, labels[b]] over bf16
// logits (all math in fp32), int64 labels, fp32 loss; logits row-major contiguous, any vocab, any
// 2-byte-aligned base.
//
// A streaming reduction: every logit is read once from HBM, and the goal is to keep enough 16-byte
// loads in flight while the arithmetic per logit stays below the memory time. A bf16 logit is only
// 2 bytes, so at 4.2 TB/s a logit arrives every ~0.5 ps chip-wide and the instruction count per
// logit decides whether the kernel stays memory-bound.
//   * one CE_BLOCK-thread block per row (block_per_row): a 64-257 KB row is read by 8 warps, 4096
//     rows make several waves of blocks, and a block's end-of-row barriers are hidden by the other
//     resident blocks. 256 threads, not 512: the step's 32 unpacked values take ~48 registers, so
//     5 blocks of 256 fit an SM (1280 threads, 80 KB in flight) against 2 of 512 (1024, 64 KB);
//   * a single pass (online_softmax): each thread keeps a running max m and sum s of exp(x - m), so
//     the row is never read twice (a max-then-sum kernel reads 2x the bytes: rows do not stay in
//     the 60 MB L2 between the passes);
//   * uint4 loads of 8 bf16 (vector_access) after a scalar head up to the 16-byte boundary, with a
//     scalar tail: a row starts at any 2-byte phase when vocab % 8 != 0 or the base is offset; a
//     bf16 becomes an fp32 exactly by a shift or a mask of its 32-bit word;
//   * CE_UNROLL independent uint4 loads per thread per step (coarsening, unroll): 64 bytes in flight
//     per thread; full steps carry no predicate, and in the one partial step at the body's end a
//     load past the end is skipped and reads bf16 -inf, which adds exp(-inf) = 0;
//   * the step's values stay in registers and are passed over twice (register_cache): their max,
//     then one exponential each against the new running max and one rescale of s per step, instead
//     of the two exponentials per logit of an element-by-element online update;
//   * fast_exp2, what this kernel adds over the last version: the step's exponentials are one
//     ex2.approx.ftz.f32 each (a single MUFU op) of x*log2(e) - m*log2(e), formed by one FFMA.
//     __expf compiles without -ftz to a multiply, a range check and two predicated fix-ups around
//     the MUFU op; per logit that is ~10 instructions in all against ~6 now. The flushed results are
//     below 2^-126 of the running max's term, nothing next to the sum they go into;
//   * __expf (fast_math) for the scalar head/tail elements and the block rescale, logf once per row;
//   * the (m, s) pairs meet in a block max (warp __shfl_xor_sync butterflies and one shared slot per
//     warp: warp_reduction), each partial rescaled to the block max, then a block sum;
//   * thread 0 fetches labels[b] and the target logit before the stream starts, so those two
//     dependent loads overlap the row instead of trailing it.
// m starts at -FLT_MAX rather than -inf, so no m - m_new is ever inf - inf (NaN), even for threads
// that see no element (vocab < CE_BLOCK). A label outside [0, vocab) gives NaN, never a stray read.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <float.h>
#include <stdint.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef CE_BLOCK
#define CE_BLOCK 256   // threads per block, one block per row (a power of two, >= 32)
#endif
#ifndef CE_UNROLL
#define CE_UNROLL 4    // uint4 loads (8 bf16 each) in flight per thread
#endif

static_assert(CE_BLOCK >= 32 && CE_BLOCK <= 1024 && (CE_BLOCK & (CE_BLOCK - 1)) == 0,
              "CE_BLOCK must be a power of two in [32, 1024]");

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide max / sum, the result in every thread: each warp reduces the CE_BLOCK / 32 warp
// partials itself (no broadcast step). The trailing barrier lets the caller reuse s_warp.
__device__ __forceinline__ float block_max(float v, float* s_warp) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max(v);
    if (lane == 0) s_warp[warp] = v;
    __syncthreads();
    v = warp_max(lane < CE_BLOCK / 32 ? s_warp[lane] : -FLT_MAX);
    __syncthreads();
    return v;
}

__device__ __forceinline__ float block_sum(float v, float* s_warp) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) s_warp[warp] = v;
    __syncthreads();
    v = warp_sum(lane < CE_BLOCK / 32 ? s_warp[lane] : 0.0f);
    __syncthreads();
    return v;
}

// One element (of the scalar head or tail) into a running (max, sum of exp(x - max)) pair. m starts
// at -FLT_MAX, not -inf, so m - m_new is never inf - inf.
__device__ __forceinline__ void online_update(float& m, float& s, float x) {
    const float m_new = fmaxf(m, x);
    s = s * __expf(m - m_new) + __expf(x - m_new);
    m = m_new;
}

// The two bf16 of a 32-bit word as floats (exact: a bf16 is the top half of an fp32); the element
// at the lower address is the low half.
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ void online_update2(float& m, float& s, uint32_t w) {
    online_update(m, s, bf16_lo(w));
    online_update(m, s, bf16_hi(w));
}

__device__ __forceinline__ float max8(const uint4& v) {
    return fmaxf(fmaxf(fmaxf(bf16_lo(v.x), bf16_hi(v.x)), fmaxf(bf16_lo(v.y), bf16_hi(v.y))),
                 fmaxf(fmaxf(bf16_lo(v.z), bf16_hi(v.z)), fmaxf(bf16_lo(v.w), bf16_hi(v.w))));
}

#define CE_LOG2E 1.4426950408889634f

// 2^t as one MUFU op: ex2.approx.ftz.f32 (rel. error ~2^-22; exact 1 at 0, 0 at -inf; a result
// below 2^-126 is flushed to 0).
__device__ __forceinline__ float ex2_ftz(float t) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(t));
    return r;
}

// exp(x - m) of both bf16 of a word, as 2^(x*log2e - m*log2e) with m_log2 = m*log2e
__device__ __forceinline__ float exp_sum2(uint32_t w, float m_log2) {
    return ex2_ftz(fmaf(bf16_lo(w), CE_LOG2E, -m_log2)) + ex2_ftz(fmaf(bf16_hi(w), CE_LOG2E, -m_log2));
}

// One step of CE_UNROLL uint4 into the running pair. The values stay in registers and are passed
// over twice: their max first (no exponential), then one exponential each against the new running
// max, 2^(x*log2e - m_new*log2e) with the argument from one FFMA, and a single rescale of the
// running sum for the whole step (1 + 1/(8*CE_UNROLL) exponentials per logit, not 2).
__device__ __forceinline__ void online_step(float& m, float& s, const uint4* v) {
    float m_new = m;
#pragma unroll
    for (int k = 0; k < CE_UNROLL; ++k) m_new = fmaxf(m_new, max8(v[k]));
    // m*log2e overflows to -inf only for m = -FLT_MAX (a step of -inf logits): clamp, so no argument
    // below is ever inf - inf
    const float m_log2 = fmaxf(m_new * CE_LOG2E, -FLT_MAX);
    float step_sum = 0.0f;
#pragma unroll
    for (int k = 0; k < CE_UNROLL; ++k)
        step_sum += (exp_sum2(v[k].x, m_log2) + exp_sum2(v[k].y, m_log2))
                  + (exp_sum2(v[k].z, m_log2) + exp_sum2(v[k].w, m_log2));
    // the rescale in the same base-2 terms as the sums (exactly 1 while the max holds)
    s = s * ex2_ftz(fmaxf(m * CE_LOG2E, -FLT_MAX) - m_log2) + step_sum;
    m = m_new;
}

__global__ void __launch_bounds__(CE_BLOCK)
cross_entropy_block_kernel(const __nv_bfloat16* __restrict__ logits, const long long* __restrict__ labels,
                           float* __restrict__ loss, int batch, int vocab) {
    __shared__ float s_warp[CE_BLOCK / 32];
    const int tid = threadIdx.x;
    const long long b = blockIdx.x;
    const __nv_bfloat16* row = logits + b * (long long)vocab;

    // Thread 0 fetches the target logit first: its two dependent loads overlap the row stream.
    float target = 0.0f;
    if (tid == 0) {
        const long long label = labels[b];
        target = (label >= 0 && label < vocab) ? __bfloat162float(row[label])
                                               : __int_as_float(0x7fc00000);
    }

    // one pass: this thread's running max and sum of exponentials
    float m = -FLT_MAX, s = 0.0f;
    // Rows start at any 2-byte phase (vocab need not be a multiple of 8, the base may be offset):
    // a scalar head of 0..7 elements up to the next 16-byte boundary, the uint4 body, a scalar tail.
    const int head = min((int)(((16u - ((uint32_t)(uintptr_t)row & 15u)) & 15u) >> 1), vocab);
    const int nvec = (vocab - head) >> 3;  // vocab < 2^31, so every element index fits an int
    const int tail0 = head + nvec * 8;
    if (tid < head) online_update(m, s, __bfloat162float(row[tid]));
    const uint4* vp = reinterpret_cast<const uint4*>(row + head);
    int i = tid;
    // full steps: all CE_UNROLL loads in bounds, no predicate
    for (; i + (CE_UNROLL - 1) * CE_BLOCK < nvec; i += CE_BLOCK * CE_UNROLL) {
        uint4 v[CE_UNROLL];
#pragma unroll
        for (int k = 0; k < CE_UNROLL; ++k) v[k] = vp[i + k * CE_BLOCK];
        online_step(m, s, v);
    }
    // the last, partial step: a load past the body's end is skipped and reads -inf (exp(-inf) = 0);
    // 0xff80 is bf16 -inf, in both halves of every word
    if (i < nvec) {
        const uint4 none = make_uint4(0xff80ff80u, 0xff80ff80u, 0xff80ff80u, 0xff80ff80u);
        uint4 v[CE_UNROLL];
#pragma unroll
        for (int k = 0; k < CE_UNROLL; ++k) v[k] = i + k * CE_BLOCK < nvec ? vp[i + k * CE_BLOCK] : none;
        online_step(m, s, v);
    }
    if (tail0 + tid < vocab) online_update(m, s, __bfloat162float(row[tail0 + tid]));

    // combine the (m, s) pairs: the block max, each partial rescaled to it, then the block sum
    const float row_max = block_max(m, s_warp);
    const float sum = block_sum(s * __expf(m - row_max), s_warp);
    if (tid == 0) loss[b] = row_max + logf(sum) - target;
}

extern "C" cudaError_t cross_entropy_bf16(const __nv_bfloat16* logits, const long long* labels, float* loss, int batch, int vocab, cudaStream_t stream) {
    if (batch <= 0) return cudaSuccess;
    cross_entropy_block_kernel<<<batch, CE_BLOCK, 0, stream>>>(logits, labels, loss, batch, vocab);
    return cudaGetLastError();
}
