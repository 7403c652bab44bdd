#include <cuda_runtime.h>
#include <math.h>

// v1: one block per row. Threads stride over the row; a shared-memory tree combines their maxima,
// then their sums.
template <int BLOCK>
__global__ void softmax_block(const float* x, float* y, int rows, int cols) {
    __shared__ float red[BLOCK];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    const float* in = x + (size_t)row * cols;
    float* out = y + (size_t)row * cols;

    float mx = -INFINITY;
    for (int j = tid; j < cols; j += BLOCK) mx = fmaxf(mx, in[j]);
    red[tid] = mx;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
        __syncthreads();
    }
    float row_max = red[0];
    __syncthreads();

    float sum = 0.f;
    for (int j = tid; j < cols; j += BLOCK) sum += expf(in[j] - row_max);
    red[tid] = sum;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    float inv = 1.0f / red[0];

    for (int j = tid; j < cols; j += BLOCK) out[j] = expf(in[j] - row_max) * inv;
}

extern "C" cudaError_t softmax_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    softmax_block<256><<<rows, 256, 0, stream>>>(x, y, rows, cols);
    return cudaGetLastError();
}
