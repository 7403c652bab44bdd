// Log-softmax over each row of an fp32 [num_rows, num_cols] matrix. One thread per row; the body sits
// inside its bounds check, with row pointers from a size_t offset.
#include <cuda_runtime.h>
#include <math.h>

__global__ void log_softmax_kernel(const float* input, float* output, int num_rows, int num_cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < num_rows) {
        const float* x = input + (size_t)row * num_cols;
        float* y = output + (size_t)row * num_cols;
        float mx = -INFINITY;
        for (int c = 0; c < num_cols; ++c) mx = fmaxf(mx, x[c]);
        float sum = 0.0f;
        for (int c = 0; c < num_cols; ++c) sum += expf(x[c] - mx);
        float lse = mx + logf(sum);
        for (int c = 0; c < num_cols; ++c) y[c] = x[c] - lse;
    }
}

extern "C" cudaError_t log_softmax(const float* input, float* output, int num_rows, int num_cols, cudaStream_t stream) {
    int block = 256;
    int grid = (num_rows + block - 1) / block;
    log_softmax_kernel<<<grid, block, 0, stream>>>(input, output, num_rows, num_cols);
    return cudaGetLastError();
}
