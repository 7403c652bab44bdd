#include <cuda_runtime.h>

/*
    Row sums, version 2: the tree completely unrolled. The block size is a template parameter, so
    every level of the tree is a test the compiler resolves, and the last warp runs without
    __syncthreads (warp-synchronous, __syncwarp between its reads and writes).
*/
template <unsigned int blockSize>
__device__ void warpReduce(volatile float *sdata, unsigned int tid)
{
    // read, then write after every lane has read: no lane overwrites a value another still needs
    float v = sdata[tid];
    if (blockSize >= 64) { v += sdata[tid + 32]; __syncwarp(); sdata[tid] = v; __syncwarp(); }
    if (blockSize >= 32) { v += sdata[tid + 16]; __syncwarp(); sdata[tid] = v; __syncwarp(); }
    if (blockSize >= 16) { v += sdata[tid + 8]; __syncwarp(); sdata[tid] = v; __syncwarp(); }
    if (blockSize >= 8) { v += sdata[tid + 4]; __syncwarp(); sdata[tid] = v; __syncwarp(); }
    if (blockSize >= 4) { v += sdata[tid + 2]; __syncwarp(); sdata[tid] = v; __syncwarp(); }
    if (blockSize >= 2) { v += sdata[tid + 1]; __syncwarp(); sdata[tid] = v; __syncwarp(); }
}

template <unsigned int blockSize>
__global__ void row_sum2(const float *g_idata, float *g_odata, unsigned int cols)
{
    extern __shared__ float sdata[];

    unsigned int tid = threadIdx.x;
    const float *in = g_idata + (size_t)blockIdx.x * cols;

    float mySum = 0.0f;
    for (unsigned int i = tid; i < cols; i += blockSize)
        mySum += in[i];
    sdata[tid] = mySum;
    __syncthreads();

    if (blockSize >= 512) { if (tid < 256) { sdata[tid] += sdata[tid + 256]; } __syncthreads(); }
    if (blockSize >= 256) { if (tid < 128) { sdata[tid] += sdata[tid + 128]; } __syncthreads(); }
    if (blockSize >= 128) { if (tid < 64) { sdata[tid] += sdata[tid + 64]; } __syncthreads(); }

    if (tid < 32) warpReduce<blockSize>(sdata, tid);

    if (tid == 0) g_odata[blockIdx.x] = sdata[0];
}

extern "C" cudaError_t row_sum(const float *x, float *out, int rows, int cols, cudaStream_t stream)
{
    const int threads = 256;
    row_sum2<threads><<<rows, threads, threads * sizeof(float), stream>>>(x, out, cols);
    return cudaGetLastError();
}
