// LayerNorm over each row of fp32 X [m, n] with gamma and beta. One thread per row, an early return;
// every pass recomputes the element's flat index, the variance is the mean of (X - mean)^2 written
// as a product of two reads, and the statistics are divided in place after their loops.
#include <cuda_runtime.h>

#define THREADS_PER_BLOCK 256

#ifndef LAYER_NORM_ROW_THREADS
#define LAYER_NORM_ROW_THREADS 256  // threads per block: a block per row
#endif
static_assert(LAYER_NORM_ROW_THREADS >= 32 && LAYER_NORM_ROW_THREADS <= 1024 && (LAYER_NORM_ROW_THREADS & (LAYER_NORM_ROW_THREADS - 1)) == 0, "LAYER_NORM_ROW_THREADS (threads per block) must be a power of two from 32 to 1024");
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

__global__ void layer_norm_naive(const float* X, const float* gamma, const float* beta, float* Y, int m, int n,
                                 float epsilon) {
    int row = blockIdx.x;
    if (row >= m) return;
    const int kl_t = threadIdx.x, kl_n = blockDim.x;  // the thread, and the threads sharing a row
    float mean = 0.0f;
    const int kl_nv = (reinterpret_cast<unsigned long long>(X + row * n) % 16 == 0 && reinterpret_cast<unsigned long long>(gamma) % 16 == 0 && reinterpret_cast<unsigned long long>(beta) % 16 == 0) ? n / 4 : 0;  // 4-element units of the row (0: a misaligned row, element by element)
    for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
        const float4 kl_ld0 = *reinterpret_cast<const float4*>(X + row * n + (long long)kl_u * 4);
        for (int kl_l = 0; kl_l < 4; ++kl_l) {
            const int col = kl_u * 4 + kl_l;
            {
                int idx = row * n + col;
                mean += reinterpret_cast<const float*>(&kl_ld0)[kl_l];
            }
        }
    }
    for (int col = kl_nv * 4 + kl_t; col < n; col += kl_n) {
        int idx = row * n + col;
        mean += X[idx];
    }
    mean = kl_row_sum(mean);
    mean /= n;
    float var = 0.0f;
    for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
        const float4 kl_ld0 = *reinterpret_cast<const float4*>(X + row * n + (long long)kl_u * 4);
        for (int kl_l = 0; kl_l < 4; ++kl_l) {
            const int col = kl_u * 4 + kl_l;
            {
                int idx = row * n + col;
                var += (reinterpret_cast<const float*>(&kl_ld0)[kl_l] - mean) * (reinterpret_cast<const float*>(&kl_ld0)[kl_l] - mean);
            }
        }
    }
    for (int col = kl_nv * 4 + kl_t; col < n; col += kl_n) {
        int idx = row * n + col;
        var += (X[idx] - mean) * (X[idx] - mean);
    }
    var = kl_row_sum(var);
    var /= n;
    float inv_std = rsqrtf(var + epsilon);
    for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
        const float4 kl_ld0 = *reinterpret_cast<const float4*>(X + row * n + (long long)kl_u * 4);
        const float4 kl_ld1 = *reinterpret_cast<const float4*>(gamma + (long long)kl_u * 4);
        const float4 kl_ld2 = *reinterpret_cast<const float4*>(beta + (long long)kl_u * 4);
        for (int kl_l = 0; kl_l < 4; ++kl_l) {
            const int col = kl_u * 4 + kl_l;
            {
                int idx = row * n + col;
                Y[idx] = (reinterpret_cast<const float*>(&kl_ld0)[kl_l] - mean) * inv_std * reinterpret_cast<const float*>(&kl_ld1)[kl_l] + reinterpret_cast<const float*>(&kl_ld2)[kl_l];
            }
        }
    }
    for (int col = kl_nv * 4 + kl_t; col < n; col += kl_n) {
        int idx = row * n + col;
        Y[idx] = (X[idx] - mean) * inv_std * gamma[col] + beta[col];
    }
}

extern "C" cudaError_t layer_norm(const float* X, const float* gamma, const float* beta, float* Y, int m, int n,
                                  float epsilon, cudaStream_t stream) {
    int blocks = m;
    layer_norm_naive<<<blocks, LAYER_NORM_ROW_THREADS, 0, stream>>>(X, gamma, beta, Y, m, n, epsilon);
    return cudaGetLastError();
}
