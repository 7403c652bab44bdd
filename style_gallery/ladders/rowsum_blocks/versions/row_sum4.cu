#include <cuda_runtime.h>

/*
    Row sums, version 4: 128-bit loads. Rows hold a whole number of float4 and start 16-byte
    aligned, so each thread adds a float4 per step.
*/
template <unsigned int blockSize>
__global__ void row_sum4(const float *g_idata, float *g_odata, unsigned int cols)
{
    extern __shared__ float sdata[];

    unsigned int tid = threadIdx.x;
    const float4 *in = reinterpret_cast<const float4 *>(g_idata + (size_t)blockIdx.x * cols);
    unsigned int n4 = cols / 4;

    float mySum = 0.0f;
    for (unsigned int i = tid; i < n4; i += blockSize)
    {
        float4 v = in[i];
        mySum += (v.x + v.y) + (v.z + v.w);
    }
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
    row_sum4<threads><<<rows, threads, threads * sizeof(float), stream>>>(x, out, cols);
    return cudaGetLastError();
}
