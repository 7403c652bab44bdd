// RMSNorm over each token of fp32 x [num_tokens, hidden_size] with a weight. One thread per token,
// the body inside its bounds check, every element indexed from the token's flat offset.
#include <cuda_runtime.h>

#ifndef RMS_NORM_ROW_THREADS
#define RMS_NORM_ROW_THREADS 512  // threads per block: a block per row
#endif
static_assert(RMS_NORM_ROW_THREADS >= 32 && RMS_NORM_ROW_THREADS <= 1024 && (RMS_NORM_ROW_THREADS & (RMS_NORM_ROW_THREADS - 1)) == 0, "RMS_NORM_ROW_THREADS (threads per block) must be a power of two from 32 to 1024");
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

__global__ void rms_norm_kernel(const float* x, const float* w, float* y, int num_tokens, int hidden_size,
                                float eps) {
    int token = blockIdx.x;
    if (token < num_tokens) {
        const int kl_t = threadIdx.x, kl_n = blockDim.x;  // the thread, and the threads sharing a row
        float ss = 0.f;
        const int kl_nv = (reinterpret_cast<unsigned long long>(x + token * hidden_size) % 16 == 0 && reinterpret_cast<unsigned long long>(w) % 16 == 0) ? hidden_size / 4 : 0;  // 4-element units of the row (0: a misaligned row, element by element)
        for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
            const float4 kl_ld0 = *reinterpret_cast<const float4*>(x + token * hidden_size + (long long)kl_u * 4);
            for (int kl_l = 0; kl_l < 4; ++kl_l) {
                {
                    float v = reinterpret_cast<const float*>(&kl_ld0)[kl_l];
                    ss += v * v;
                }
            }
        }
        for (int h = kl_nv * 4 + kl_t; h < hidden_size; h += kl_n) {
            float v = x[token * hidden_size + h];
            ss += v * v;
        }
        ss = kl_row_sum(ss);
        float scale = rsqrtf(ss / hidden_size + eps);
        for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
            const float4 kl_ld0 = *reinterpret_cast<const float4*>(x + token * hidden_size + (long long)kl_u * 4);
            const float4 kl_ld1 = *reinterpret_cast<const float4*>(w + (long long)kl_u * 4);
            for (int kl_l = 0; kl_l < 4; ++kl_l) {
                const int h = kl_u * 4 + kl_l;
                {
                    y[token * hidden_size + h] = reinterpret_cast<const float*>(&kl_ld0)[kl_l] * scale * reinterpret_cast<const float*>(&kl_ld1)[kl_l];
                }
            }
        }
        for (int h = kl_nv * 4 + kl_t; h < hidden_size; h += kl_n) {
            y[token * hidden_size + h] = x[token * hidden_size + h] * scale * w[h];
        }
    }
}

extern "C" cudaError_t rms_norm(const float* x, const float* w, float* y, int num_tokens, int hidden_size, float eps,
                                cudaStream_t stream) {
    rms_norm_kernel<<<num_tokens, RMS_NORM_ROW_THREADS, 0, stream>>>(x, w, y, num_tokens, hidden_size, eps);
    return cudaGetLastError();
}
