#include <cuda_runtime.h>

/*
    Reduction #5: completely unrolled. The block size is a template parameter, so every step of the
    tree is a compile-time test, the shuffle loop unrolls, and ptxas knows the block size.
*/
template <unsigned int blockSize>
__global__ void __launch_bounds__(blockSize) reduce5(const float *g_idata, float *g_odata, unsigned int n)
{
    extern __shared__ float sdata[];

    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * (blockSize * 2) + threadIdx.x;

    float mySum = (i < n) ? g_idata[i] : 0;
    if (i + blockSize < n) mySum += g_idata[i + blockSize];
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
    int blocks = (n + threads * 2 - 1) / (threads * 2);
    size_t smem = threads * sizeof(float);
    switch (threads)
    {
        case 1024: reduce5<1024><<<blocks, 1024, smem, stream>>>(x, out, n); break;
        case 512: reduce5<512><<<blocks, 512, smem, stream>>>(x, out, n); break;
        case 256: reduce5<256><<<blocks, 256, smem, stream>>>(x, out, n); break;
        case 128: reduce5<128><<<blocks, 128, smem, stream>>>(x, out, n); break;
        default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
