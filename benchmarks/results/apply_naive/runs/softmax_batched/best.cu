// Softmax over the last dimension of an fp32 [batch, seq, dim] tensor. A 2-D grid: blockIdx.y is the
// batch, one thread per sequence position; a 64-bit row offset, the fast __expf.
#include <cuda_runtime.h>
#include <cfloat>

#ifndef SOFTMAX_3D_ROW_THREADS
#define SOFTMAX_3D_ROW_THREADS 256  // threads per block: a block per row
#endif
static_assert(SOFTMAX_3D_ROW_THREADS >= 32 && SOFTMAX_3D_ROW_THREADS <= 1024 && (SOFTMAX_3D_ROW_THREADS & (SOFTMAX_3D_ROW_THREADS - 1)) == 0, "SOFTMAX_3D_ROW_THREADS (threads per block) must be a power of two from 32 to 1024");
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

__global__ void softmax_lastdim_kernel(const float* __restrict__ x, float* __restrict__ y, int seq, int dim) {
    const int b = blockIdx.y;
    const int s = blockIdx.x;
    if (s >= seq) return;
    const int kl_t = threadIdx.x, kl_n = blockDim.x;  // the thread, and the threads sharing a row
    const long long base = ((long long)b * seq + s) * dim;
    float m = -FLT_MAX;
    for (int d = kl_t; d < dim; d += kl_n) m = fmaxf(m, x[base + d]);
    m = kl_row_max(m);
    float z = 0.f;
    for (int d = kl_t; d < dim; d += kl_n) z += __expf(x[base + d] - m);
    z = kl_row_sum(z);
    const float inv = 1.f / z;
    for (int d = kl_t; d < dim; d += kl_n) y[base + d] = __expf(x[base + d] - m) * inv;
}

extern "C" cudaError_t softmax_3d(const float* x, float* y, int batch, int seq, int dim, cudaStream_t stream) {
    if (batch <= 0 || seq <= 0) return cudaSuccess;
    dim3 grid(seq, batch);
    dim3 block(SOFTMAX_3D_ROW_THREADS);
    softmax_lastdim_kernel<<<grid, block, 0, stream>>>(x, y, seq, dim);
    return cudaGetLastError();
}
