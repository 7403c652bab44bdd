#include <cuda_runtime.h>

/*
    Reduction #2: sequential addressing. The stride starts at half the block and halves: thread t
    adds element t + s, so a warp reads 32 consecutive words (no bank conflicts).
*/
__global__ void reduce2(const float *g_idata, float *g_odata, unsigned int n)
{
    extern __shared__ float sdata[];

    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;

    sdata[tid] = (i < n) ? g_idata[i] : 0;
    __syncthreads();

    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1)
    {
        if (tid < s)
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
    reduce2<<<blocks, threads, threads * sizeof(float), stream>>>(x, out, n);
    return cudaGetLastError();
}
