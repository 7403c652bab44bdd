#include <cuda_runtime.h>

/*
    Row sums, version 1: one block per row. Each thread adds a strided slice of the row into a
    register, then the block folds its shared array in half until one value is left (sequential
    addressing, no divergent warps until the last steps).
*/
__global__ void row_sum1(const float *g_idata, float *g_odata, unsigned int cols)
{
    extern __shared__ float sdata[];

    unsigned int tid = threadIdx.x;
    const float *in = g_idata + (size_t)blockIdx.x * cols;

    float mySum = 0.0f;
    for (unsigned int i = tid; i < cols; i += blockDim.x)
        mySum += in[i];
    sdata[tid] = mySum;
    __syncthreads();

    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1)
    {
        if (tid < s)
            sdata[tid] += sdata[tid + s];
        __syncthreads();
    }

    if (tid == 0) g_odata[blockIdx.x] = sdata[0];
}

extern "C" cudaError_t row_sum(const float *x, float *out, int rows, int cols, cudaStream_t stream)
{
    int threads = 256;
    row_sum1<<<rows, threads, threads * sizeof(float), stream>>>(x, out, cols);
    return cudaGetLastError();
}
