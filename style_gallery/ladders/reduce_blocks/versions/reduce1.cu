#include <cuda_runtime.h>

/*
    Reduction #1: interleaved addressing with a strided index: thread t works on element 2*s*t, so
    the active threads are contiguous and whole warps retire (no divergent modulo). Shared-memory
    bank conflicts remain.
*/
__global__ void reduce1(const float *g_idata, float *g_odata, unsigned int n)
{
    extern __shared__ float sdata[];

    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;

    sdata[tid] = (i < n) ? g_idata[i] : 0;
    __syncthreads();

    for (unsigned int s = 1; s < blockDim.x; s *= 2)
    {
        unsigned int index = 2 * s * tid;
        if (index < blockDim.x)
        {
            sdata[index] += sdata[index + s];
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
    reduce1<<<blocks, threads, threads * sizeof(float), stream>>>(x, out, n);
    return cudaGetLastError();
}
