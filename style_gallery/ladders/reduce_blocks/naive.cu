#include <cuda_runtime.h>

/*
    Reduction #0: interleaved addressing. Every thread loads one element into shared memory; at
    step s the threads whose index is a multiple of 2s add the element s away. The modulo makes
    warps diverge. Each block adds its partial sum to the result with one atomic.
*/
__global__ void reduce0(const float *g_idata, float *g_odata, unsigned int n)
{
    extern __shared__ float sdata[];

    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;

    sdata[tid] = (i < n) ? g_idata[i] : 0;
    __syncthreads();

    for (unsigned int s = 1; s < blockDim.x; s *= 2)
    {
        if ((tid % (2 * s)) == 0)
        {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();
    }

    if (tid == 0) atomicAdd(g_odata, sdata[0]);
}

extern "C" cudaError_t reduce_sum(const float *x, float *out, int n, int threads, cudaStream_t stream)
{
    cudaError_t err = cudaMemsetAsync(out, 0, sizeof(float), stream);
    if (err != cudaSuccess) return err;
    int blocks = (n + threads - 1) / threads;
    reduce0<<<blocks, threads, threads * sizeof(float), stream>>>(x, out, n);
    return cudaGetLastError();
}
