#include <cuda_runtime.h>

/*
    Row sums, version 3: the last warp reduces in registers. Each of its lanes takes its partial sum
    plus the one 32 slots up, then shuffles halve the warp five times.
*/
template <unsigned int blockSize>
__global__ void row_sum3(const float *g_idata, float *g_odata, unsigned int cols)
{
    extern __shared__ float sdata[];

    unsigned int tid = threadIdx.x;
    const float *in = g_idata + (size_t)blockIdx.x * cols;

    float mySum = 0.0f;
    for (unsigned int i = tid; i < cols; i += blockSize)
        mySum += in[i];
    sdata[tid] = mySum;
    __syncthreads();

    if (blockSize >= 512) { if (tid < 256) { sdata[tid] = mySum = mySum + sdata[tid + 256]; } __syncthreads(); }
    if (blockSize >= 256) { if (tid < 128) { sdata[tid] = mySum = mySum + sdata[tid + 128]; } __syncthreads(); }
    if (blockSize >= 128) { if (tid < 64) { sdata[tid] = mySum = mySum + sdata[tid + 64]; } __syncthreads(); }

    if (tid < 32)
    {
        if (blockSize >= 64) mySum += sdata[tid + 32];
        for (int offset = warpSize / 2; offset > 0; offset /= 2)
            mySum += __shfl_down_sync(0xffffffff, mySum, offset);
    }

    if (tid == 0) g_odata[blockIdx.x] = mySum;
}

extern "C" cudaError_t row_sum(const float *x, float *out, int rows, int cols, cudaStream_t stream)
{
    const int threads = 256;
    row_sum3<threads><<<rows, threads, threads * sizeof(float), stream>>>(x, out, cols);
    return cudaGetLastError();
}
