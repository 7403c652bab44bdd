// fmha, the textbook way: one block per query row. The row's S scores are written to shared
// memory (thread t computes keys t, t + blockDim, ...), the block finds their maximum and the sum
// of the exponentials, then thread d accumulates output column d over every key. Scores are
// materialized and read three times; all arithmetic in fp32; one element per load.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define NAIVE_THREADS 128
#define NAIVE_MAX_S 12288  // 48 KB of fp32 scores

__global__ void fmha_naive_kernel(const __half* q, const __half* k, const __half* v, __half* out, int S, int D,
                                  float scale) {
    extern __shared__ float scores[];
    __shared__ float red[NAIVE_THREADS];
    const int row = blockIdx.x, t = threadIdx.x;
    const long long head = (long long)blockIdx.y * S * D;
    const __half* qr = q + head + (long long)row * D;
    for (int j = t; j < S; j += NAIVE_THREADS) {
        float s = 0.0f;
        for (int d = 0; d < D; ++d) s += __half2float(qr[d]) * __half2float(k[head + (long long)j * D + d]);
        scores[j] = s * scale;
    }
    __syncthreads();
    float m = -INFINITY;
    for (int j = t; j < S; j += NAIVE_THREADS) m = fmaxf(m, scores[j]);
    red[t] = m;
    __syncthreads();
    for (int w = NAIVE_THREADS / 2; w > 0; w /= 2) {
        if (t < w) red[t] = fmaxf(red[t], red[t + w]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int j = t; j < S; j += NAIVE_THREADS) {
        const float e = expf(scores[j] - m);
        scores[j] = e;
        sum += e;
    }
    red[t] = sum;
    __syncthreads();
    for (int w = NAIVE_THREADS / 2; w > 0; w /= 2) {
        if (t < w) red[t] += red[t + w];
        __syncthreads();
    }
    sum = red[0];
    for (int d = t; d < D; d += NAIVE_THREADS) {
        float acc = 0.0f;
        for (int j = 0; j < S; ++j) acc += scores[j] * __half2float(v[head + (long long)j * D + d]);
        out[head + (long long)row * D + d] = __float2half(acc / sum);
    }
}

extern "C" cudaError_t fmha(const __half* q, const __half* k, const __half* v, __half* out, int B, int H, int S, int D,
                            cudaStream_t stream) {
    if (B <= 0 || H <= 0 || S <= 0 || D <= 0) return cudaSuccess;
    if (S > NAIVE_MAX_S || B * H > 65535) return cudaErrorInvalidValue;
    dim3 grid(S, B * H);
    fmha_naive_kernel<<<grid, NAIVE_THREADS, S * sizeof(float), stream>>>(q, k, v, out, S, D, 1.0f / sqrtf((float)D));
    return cudaGetLastError();
}
