// Log-softmax over the last dimension of fp32 logits [B, T, V], the output argument first. One thread
// per (b, t) row, its index checked against B * T; the maximum starts from a large negative constant
// and compares element by element.
#include <cuda_runtime.h>

#ifndef LOGSOFTMAX_FORWARD_ROW_THREADS
#define LOGSOFTMAX_FORWARD_ROW_THREADS 256  // threads per block: a block per row
#endif
static_assert(LOGSOFTMAX_FORWARD_ROW_THREADS >= 32 && LOGSOFTMAX_FORWARD_ROW_THREADS <= 1024 && (LOGSOFTMAX_FORWARD_ROW_THREADS & (LOGSOFTMAX_FORWARD_ROW_THREADS - 1)) == 0, "LOGSOFTMAX_FORWARD_ROW_THREADS (threads per block) must be a power of two from 32 to 1024");
__device__ __forceinline__ float kl_row_max(float v) {
    // each warp combines in registers (a butterfly of shuffles), then the warps' partials through
    // shared memory; every thread gets the result
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __shared__ float kl_part[32];
    if ((threadIdx.x & 31u) == 0) kl_part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = kl_part[0];
    for (unsigned w = 1; w < blockDim.x / 32; ++w) v = fmaxf(v, kl_part[w]);
    __syncthreads();
    return v;
}

__device__ __forceinline__ float kl_row_sum(float v) {
    // each warp combines in registers (a butterfly of shuffles), then the warps' partials through
    // shared memory; every thread gets the result
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __shared__ float kl_part[32];
    if ((threadIdx.x & 31u) == 0) kl_part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = kl_part[0];
    for (unsigned w = 1; w < blockDim.x / 32; ++w) v = v + kl_part[w];
    __syncthreads();
    return v;
}

__global__ void logsoftmax_fwd(float* out, const float* logits, int B, int T, int V) {
    int bt = blockIdx.x;
    if (bt >= B * T) { return; }
    const int kl_t = threadIdx.x, kl_n = blockDim.x;  // the thread, and the threads sharing a row
    const float* lp = logits + bt * V;
    float maxval = -10000.0f;
    const int kl_nv = (reinterpret_cast<unsigned long long>(lp) % 16 == 0) ? V / 4 : 0;  // 4-element units of the row (0: a misaligned row, element by element)
    for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
        const float4 kl_ld0 = *reinterpret_cast<const float4*>(lp + (long long)kl_u * 4);
        for (int kl_l = 0; kl_l < 4; ++kl_l) {
            {
                if (reinterpret_cast<const float*>(&kl_ld0)[kl_l] > maxval) { maxval = reinterpret_cast<const float*>(&kl_ld0)[kl_l]; }
            }
        }
    }
    for (int i = kl_nv * 4 + kl_t; i < V; i += kl_n) {
        if (lp[i] > maxval) { maxval = lp[i]; }
    }
    maxval = kl_row_max(maxval);
    float sumval = 0.0f;
    for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
        const float4 kl_ld0 = *reinterpret_cast<const float4*>(lp + (long long)kl_u * 4);
        for (int kl_l = 0; kl_l < 4; ++kl_l) {
            {
                sumval += expf(reinterpret_cast<const float*>(&kl_ld0)[kl_l] - maxval);
            }
        }
    }
    for (int i = kl_nv * 4 + kl_t; i < V; i += kl_n) {
        sumval += expf(lp[i] - maxval);
    }
    sumval = kl_row_sum(sumval);
    float logsum = logf(sumval);
    for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
        const float4 kl_ld0 = *reinterpret_cast<const float4*>(lp + (long long)kl_u * 4);
        for (int kl_l = 0; kl_l < 4; ++kl_l) {
            const int i = kl_u * 4 + kl_l;
            {
                out[bt * V + i] = reinterpret_cast<const float*>(&kl_ld0)[kl_l] - maxval - logsum;
            }
        }
    }
    for (int i = kl_nv * 4 + kl_t; i < V; i += kl_n) {
        out[bt * V + i] = lp[i] - maxval - logsum;
    }
}

extern "C" cudaError_t logsoftmax_forward(float* out, const float* logits, int B, int T, int V, cudaStream_t stream) {
    const int block_size = LOGSOFTMAX_FORWARD_ROW_THREADS;
    const int n = B * T;
    logsoftmax_fwd<<<B * T, block_size, 0, stream>>>(out, logits, B, T, V);
    return cudaGetLastError();
}
