// RMSNorm over each row of a bf16 [rows, dim] matrix with a bf16 gain, fp32 math, output first. One
// thread per row; the check is written `!(r < rows)`, the launch through dim3 variables.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#ifndef RMSNORM_BF16_ROW_THREADS
#define RMSNORM_BF16_ROW_THREADS 256  // threads per block: a block per row
#endif
static_assert(RMSNORM_BF16_ROW_THREADS >= 32 && RMSNORM_BF16_ROW_THREADS <= 1024 && (RMSNORM_BF16_ROW_THREADS & (RMSNORM_BF16_ROW_THREADS - 1)) == 0, "RMSNORM_BF16_ROW_THREADS (threads per block) must be a power of two from 32 to 1024");
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

__global__ void rmsnorm_bf16_kernel(__nv_bfloat16* out, const __nv_bfloat16* inp, const __nv_bfloat16* gain, int rows,
                                    int dim, float epsilon) {
    const int r = blockIdx.x;
    if (!(r < rows)) return;
    const int kl_t = threadIdx.x, kl_n = blockDim.x;  // the thread, and the threads sharing a row
    const __nv_bfloat16* xr = inp + (size_t)r * dim;
    __nv_bfloat16* yr = out + (size_t)r * dim;
    float acc = 0.0f;
    for (int i = kl_t; i < dim; i += kl_n) {
        const float v = __bfloat162float(xr[i]);
        acc = acc + v * v;
    }
    acc = kl_row_sum(acc);
    const float inv_rms = 1.0f / sqrtf(acc / (float)dim + epsilon);
    for (int i = kl_t; i < dim; i += kl_n) {
        yr[i] = __float2bfloat16(__bfloat162float(xr[i]) * inv_rms * __bfloat162float(gain[i]));
    }
}

extern "C" cudaError_t rmsnorm_bf16(__nv_bfloat16* out, const __nv_bfloat16* inp, const __nv_bfloat16* gain, int rows,
                                    int dim, float epsilon, cudaStream_t stream) {
    dim3 block(RMSNORM_BF16_ROW_THREADS);
    dim3 grid(rows);
    rmsnorm_bf16_kernel<<<grid, block, 0, stream>>>(out, inp, gain, rows, dim, epsilon);
    return cudaGetLastError();
}
