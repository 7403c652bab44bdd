// Square matrix multiply, the row along threadIdx.x (rows of a read by neighbouring threads); a host
// helper sizes the grid. c = a * b, all n x n, fp32.
#include <cuda_runtime.h>

#define BLOCK_SIZE 32

__global__ void mat_mul(float *a, float *b, float *c, int n) {
    int i = blockIdx.x * BLOCK_SIZE + threadIdx.x;  // row of c
    int j = blockIdx.y * BLOCK_SIZE + threadIdx.y;  // column of c
    if (i >= n || j >= n)
        return;
    float value = 0;
    for (int e = 0; e < n; ++e) {
        float x = a[i * n + e];
        float y = b[e * n + j];
        value += x * y;
    }
    c[i * n + j] = value;
}

static cudaError_t launch_square(float *a, float *b, float *c, int n, cudaStream_t s) {
    int blocks = (n + BLOCK_SIZE - 1) / BLOCK_SIZE;
    dim3 dimGrid(blocks, blocks);
    dim3 dimBlock(BLOCK_SIZE, BLOCK_SIZE);
    mat_mul<<<dimGrid, dimBlock, 0, s>>>(a, b, c, n);
    return cudaGetLastError();
}

extern "C" cudaError_t square_matmul(float *a, float *b, float *c, int n, cudaStream_t stream) {
    return launch_square(a, b, c, n, stream);
}
