#include <cuda_runtime.h>

/*
    Reduction #6: several elements per thread. A thread sums ITEMS_PER_THREAD elements a block
    apart before the tree, so there are ITEMS_PER_THREAD times fewer blocks, trees and atomics.
*/
#define ITEMS_PER_THREAD 8

template <unsigned int blockSize>
__global__ void __launch_bounds__(blockSize) reduce6(const float *g_idata, float *g_odata, unsigned int n)
{
    extern __shared__ float sdata[];

    unsigned int tid = threadIdx.x;
    unsigned int base = blockIdx.x * (blockSize * ITEMS_PER_THREAD) + threadIdx.x;

    float mySum = 0;
#pragma unroll
    for (int k = 0; k < ITEMS_PER_THREAD; ++k)
    {
        unsigned int i = base + k * blockSize;
        if (i < n) mySum += g_idata[i];
    }
    sdata[tid] = mySum;
    __syncthreads();

    if ((blockSize >= 1024) && (tid < 512)) sdata[tid] = mySum = mySum + sdata[tid + 512];
    __syncthreads();
    if ((blockSize >= 512) && (tid < 256)) sdata[tid] = mySum = mySum + sdata[tid + 256];
    __syncthreads();
    if ((blockSize >= 256) && (tid < 128)) sdata[tid] = mySum = mySum + sdata[tid + 128];
    __syncthreads();
    if ((blockSize >= 128) && (tid < 64)) sdata[tid] = mySum = mySum + sdata[tid + 64];
    __syncthreads();

    if (tid < 32)
    {
        if (blockSize >= 64) mySum += sdata[tid + 32];
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2)
        {
            mySum += __shfl_down_sync(0xffffffff, mySum, offset);
        }
    }

    if (tid == 0) atomicAdd(g_odata, mySum);
}

extern "C" cudaError_t reduce_sum(const float *x, float *out, int n, int threads, cudaStream_t stream)
{
    cudaError_t err = cudaMemsetAsync(out, 0, sizeof(float), stream);
    if (err != cudaSuccess) return err;
    int blocks = (n + threads * ITEMS_PER_THREAD - 1) / (threads * ITEMS_PER_THREAD);
    size_t smem = threads * sizeof(float);
    switch (threads)
    {
        case 1024: reduce6<1024><<<blocks, 1024, smem, stream>>>(x, out, n); break;
        case 512: reduce6<512><<<blocks, 512, smem, stream>>>(x, out, n); break;
        case 256: reduce6<256><<<blocks, 256, smem, stream>>>(x, out, n); break;
        case 128: reduce6<128><<<blocks, 128, smem, stream>>>(x, out, n); break;
        default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
