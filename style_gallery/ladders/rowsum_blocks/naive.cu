#include <cuda_runtime.h>

// Row sums, version 0: a thread per row adds its row from left to right.
__global__ void row_sum0(const float *g_idata, float *g_odata, unsigned int rows, unsigned int cols)
{
    unsigned int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;

    const float *in = g_idata + (size_t)row * cols;
    float sum = 0.0f;
    for (unsigned int i = 0; i < cols; i++)
        sum += in[i];
    g_odata[row] = sum;
}

extern "C" cudaError_t row_sum(const float *x, float *out, int rows, int cols, cudaStream_t stream)
{
    int threads = 256;
    int blocks = (rows + threads - 1) / threads;
    row_sum0<<<blocks, threads, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
