#include <cuda_runtime.h>
#include <math.h>

// v0: a thread per row, three sweeps (max, sum of exponentials, write).
__global__ void softmax_naive(const float* x, float* y, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* in = x + (size_t)row * cols;
    float* out = y + (size_t)row * cols;

    float mx = -INFINITY;
    for (int j = 0; j < cols; ++j) mx = fmaxf(mx, in[j]);
    float sum = 0.f;
    for (int j = 0; j < cols; ++j) sum += expf(in[j] - mx);
    for (int j = 0; j < cols; ++j) out[j] = expf(in[j] - mx) / sum;
}

extern "C" cudaError_t softmax_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    softmax_naive<<<(rows + 127) / 128, 128, 0, stream>>>(x, y, rows, cols);
    return cudaGetLastError();
}
