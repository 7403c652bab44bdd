// Sum over the last dimension, [batch_size, dim] -> [batch_size], fp32. One thread per row; the body
// sits inside the bounds check and indexes through a local offset, as many first kernels do.
#include <cuda_runtime.h>

#ifndef SUM_LAST_DIM_ROW_THREADS
#define SUM_LAST_DIM_ROW_THREADS 256  // threads per block: a block per row
#endif
static_assert(SUM_LAST_DIM_ROW_THREADS >= 32 && SUM_LAST_DIM_ROW_THREADS <= 1024 && (SUM_LAST_DIM_ROW_THREADS & (SUM_LAST_DIM_ROW_THREADS - 1)) == 0, "SUM_LAST_DIM_ROW_THREADS (threads per block) must be a power of two from 32 to 1024");
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

__global__ void row_sum_kernel(const float* input, float* output, int batch_size, int dim) {
    int idx = blockIdx.x;
    if (idx < batch_size) {
        const int kl_t = threadIdx.x, kl_n = blockDim.x;  // the thread, and the threads sharing a row
        float sum = 0.0f;
        const int kl_nv = (reinterpret_cast<unsigned long long>(input + idx * dim) % 16 == 0) ? dim / 4 : 0;  // 4-element units of the row (0: a misaligned row, element by element)
        for (int kl_u = kl_t; kl_u < kl_nv; kl_u += kl_n) {
            const float4 kl_ld0 = *reinterpret_cast<const float4*>(input + idx * dim + (long long)kl_u * 4);
            for (int kl_l = 0; kl_l < 4; ++kl_l) {
                const int j = kl_u * 4 + kl_l;
                {
                    int in_idx = idx * dim + j;
                    sum += reinterpret_cast<const float*>(&kl_ld0)[kl_l];
                }
            }
        }
        for (int j = kl_nv * 4 + kl_t; j < dim; j += kl_n) {
            int in_idx = idx * dim + j;
            sum += input[in_idx];
        }
        sum = kl_row_sum(sum);
        if (kl_t == 0) output[idx] = sum;
    }
}

extern "C" cudaError_t sum_last_dim(const float* input, float* output, int batch_size, int dim, cudaStream_t stream) {
    const int threads = SUM_LAST_DIM_ROW_THREADS;
    const int blocks = batch_size;
    row_sum_kernel<<<blocks, threads, 0, stream>>>(input, output, batch_size, dim);
    return cudaGetLastError();
}
