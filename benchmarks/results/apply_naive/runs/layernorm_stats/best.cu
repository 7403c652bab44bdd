// LayerNorm forward over each row of fp32 inp [N, C], writing the output and each row's mean and
// reciprocal standard deviation (for a backward pass). Outputs first; eps a constant declared before the
// bounds check; the body inside `if (n < N)`; the statistics divided after their loops.
#include <cuda_runtime.h>

#ifndef LAYERNORM_FORWARD_ROW_THREADS
#define LAYERNORM_FORWARD_ROW_THREADS 256  // threads per block: a block per row
#endif
static_assert(LAYERNORM_FORWARD_ROW_THREADS >= 32 && LAYERNORM_FORWARD_ROW_THREADS <= 1024 && (LAYERNORM_FORWARD_ROW_THREADS & (LAYERNORM_FORWARD_ROW_THREADS - 1)) == 0, "LAYERNORM_FORWARD_ROW_THREADS (threads per block) must be a power of two from 32 to 1024");
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

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int N, int C) {
    int n = blockIdx.x;
    const float eps = 1e-5f;
    if (n < N) {
        const int kl_t = threadIdx.x, kl_n = blockDim.x;  // the thread, and the threads sharing a row
        const float* row_in = inp + n * C;
        float mu = 0.0f;
        const int kl_nv = (reinterpret_cast<unsigned long long>(row_in) % 16 == 0 && reinterpret_cast<unsigned long long>(weight) % 16 == 0 && reinterpret_cast<unsigned long long>(bias) % 16 == 0) ? C / 4 : 0;  // 4-element units of the row (0: a misaligned row, element by element)
        for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
            const float4 kl_ld0 = *reinterpret_cast<const float4*>(row_in + (long long)kl_u * 4);
            for (int kl_l = 0; kl_l < 4; ++kl_l) {
                {
                    mu += reinterpret_cast<const float*>(&kl_ld0)[kl_l];
                }
            }
        }
        for (int c = kl_nv * 4 + kl_t; c < C; c += kl_n) {
            mu += row_in[c];
        }
        mu = kl_row_sum(mu);
        mu = mu / C;
        float var = 0.0f;
        for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
            const float4 kl_ld0 = *reinterpret_cast<const float4*>(row_in + (long long)kl_u * 4);
            for (int kl_l = 0; kl_l < 4; ++kl_l) {
                {
                    float shifted = reinterpret_cast<const float*>(&kl_ld0)[kl_l] - mu;
                    var += shifted * shifted;
                }
            }
        }
        for (int c = kl_nv * 4 + kl_t; c < C; c += kl_n) {
            float shifted = row_in[c] - mu;
            var += shifted * shifted;
        }
        var = kl_row_sum(var);
        var = var / C;
        float s = 1.0f / sqrtf(var + eps);
        float* row_out = out + n * C;
        for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
            const float4 kl_ld0 = *reinterpret_cast<const float4*>(row_in + (long long)kl_u * 4);
            const float4 kl_ld1 = *reinterpret_cast<const float4*>(weight + (long long)kl_u * 4);
            const float4 kl_ld2 = *reinterpret_cast<const float4*>(bias + (long long)kl_u * 4);
            for (int kl_l = 0; kl_l < 4; ++kl_l) {
                const int c = kl_u * 4 + kl_l;
                {
                    float normed = s * (reinterpret_cast<const float*>(&kl_ld0)[kl_l] - mu);
                    row_out[c] = normed * reinterpret_cast<const float*>(&kl_ld1)[kl_l] + reinterpret_cast<const float*>(&kl_ld2)[kl_l];
                }
            }
        }
        for (int c = kl_nv * 4 + kl_t; c < C; c += kl_n) {
            float normed = s * (row_in[c] - mu);
            row_out[c] = normed * weight[c] + bias[c];
        }
        if (kl_t == 0) mean[n] = mu;
        if (kl_t == 0) rstd[n] = s;
    }
}

extern "C" cudaError_t layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                         const float* bias, int N, int C, cudaStream_t stream) {
    const int block_size = LAYERNORM_FORWARD_ROW_THREADS;
    const int grid_size = N;
    layernorm_forward_kernel<<<grid_size, block_size, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C);
    return cudaGetLastError();
}
