#include <cuda_runtime.h>

/*
    Reduction #4: unroll the last warp. Once 32 partial sums are left, the first warp finishes
    with register shuffles instead of shared memory and barriers.
*/
__global__ void reduce4(const float *g_idata, float *g_odata, unsigned int n)
{
    extern __shared__ float sdata[];

    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * (blockDim.x * 2) + threadIdx.x;

    float mySum = (i < n) ? g_idata[i] : 0;
    if (i + blockDim.x < n) mySum += g_idata[i + blockDim.x];
    sdata[tid] = mySum;
    __syncthreads();

    for (unsigned int s = blockDim.x / 2; s > 32; s >>= 1)
    {
        if (tid < s)
        {
            sdata[tid] = mySum = mySum + sdata[tid + s];
        }
        __syncthreads();
    }

    if (tid < 32)
    {
        // the second warp's partial sums are in shared memory
        if (blockDim.x >= 64) mySum += sdata[tid + 32];
        for (int offset = warpSize / 2; offset > 0; offset /= 2)
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
    reduce4<<<blocks, threads, threads * sizeof(float), stream>>>(x, out, n);
    return cudaGetLastError();
}
