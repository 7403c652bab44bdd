// LayerNorm over each row of fp32 input [batch_size, hidden]: the row is the block index and each block
// is launched with a single thread, which walks the row from a flat offset.
#include <cuda_runtime.h>
#include <math.h>

#ifndef LAYERNORM_ROW_THREADS
#define LAYERNORM_ROW_THREADS 128  // threads per block: a block per row
#endif
static_assert(LAYERNORM_ROW_THREADS >= 32 && LAYERNORM_ROW_THREADS <= 1024 && (LAYERNORM_ROW_THREADS & (LAYERNORM_ROW_THREADS - 1)) == 0, "LAYERNORM_ROW_THREADS (threads per block) must be a power of two from 32 to 1024");
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

__global__ void layernorm_kernel(const float* input, const float* gamma, const float* beta, float* output,
                                 int batch_size, int hidden, float eps) {
    int b = blockIdx.x;
    if (b >= batch_size) return;
    const int kl_t = threadIdx.x, kl_n = blockDim.x;  // the thread, and the threads sharing a row
    int offset = b * hidden;
    float sum = 0.0f;
    const int kl_nv = (reinterpret_cast<unsigned long long>(input + offset) % 16 == 0 && reinterpret_cast<unsigned long long>(gamma) % 16 == 0 && reinterpret_cast<unsigned long long>(beta) % 16 == 0) ? hidden / 4 : 0;  // 4-element units of the row (0: a misaligned row, element by element)
    for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
        const float4 kl_ld0 = *reinterpret_cast<const float4*>(input + offset + (long long)kl_u * 4);
        for (int kl_l = 0; kl_l < 4; ++kl_l) {
            sum += reinterpret_cast<const float*>(&kl_ld0)[kl_l];
        }
    }
    for (int i = kl_nv * 4 + kl_t; i < hidden; i += kl_n) sum += input[offset + i];
    sum = kl_row_sum(sum);
    float mean = sum / hidden;
    float sq = 0.0f;
    for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
        const float4 kl_ld0 = *reinterpret_cast<const float4*>(input + offset + (long long)kl_u * 4);
        for (int kl_l = 0; kl_l < 4; ++kl_l) {
            {
                float d = reinterpret_cast<const float*>(&kl_ld0)[kl_l] - mean;
                sq += d * d;
            }
        }
    }
    for (int i = kl_nv * 4 + kl_t; i < hidden; i += kl_n) {
        float d = input[offset + i] - mean;
        sq += d * d;
    }
    sq = kl_row_sum(sq);
    float inv = 1.0f / sqrtf(sq / hidden + eps);
    for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
        const float4 kl_ld0 = *reinterpret_cast<const float4*>(input + offset + (long long)kl_u * 4);
        const float4 kl_ld1 = *reinterpret_cast<const float4*>(gamma + (long long)kl_u * 4);
        const float4 kl_ld2 = *reinterpret_cast<const float4*>(beta + (long long)kl_u * 4);
        for (int kl_l = 0; kl_l < 4; ++kl_l) {
            const int i = kl_u * 4 + kl_l;
            output[offset + i] = (reinterpret_cast<const float*>(&kl_ld0)[kl_l] - mean) * inv * reinterpret_cast<const float*>(&kl_ld1)[kl_l] + reinterpret_cast<const float*>(&kl_ld2)[kl_l];
        }
    }
    for (int i = kl_nv * 4 + kl_t; i < hidden; i += kl_n) output[offset + i] = (input[offset + i] - mean) * inv * gamma[i] + beta[i];
}

extern "C" cudaError_t layernorm(const float* input, const float* gamma, const float* beta, float* output,
                                 int batch_size, int hidden, float eps, cudaStream_t stream) {
    if (batch_size <= 0) return cudaSuccess;
    layernorm_kernel<<<batch_size, LAYERNORM_ROW_THREADS, 0, stream>>>(input, gamma, beta, output, batch_size, hidden, eps);
    return cudaGetLastError();
}
