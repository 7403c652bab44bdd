// Softmax over each row of an fp32 [rows, cols] matrix (cols a size_t). One thread per row through row
// pointers: the maximum starts from the row's first element and compares the rest one by one; the
// exponentials go to the output, which a last pass divides in place by their sum.
#include <cuda_runtime.h>
#include <cstddef>

__global__ void softmax_kernel(const float* input, float* output, int rows, size_t cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* in = input + r * cols;
    float* out = output + r * cols;
    float max_val = in[0];
    for (size_t j = 1; j < cols; ++j) {
        if (in[j] > max_val) max_val = in[j];
    }
    float denom = 0.0f;
    for (size_t j = 0; j < cols; ++j) {
        out[j] = expf(in[j] - max_val);
        denom += out[j];
    }
    for (size_t j = 0; j < cols; ++j) {
        out[j] /= denom;
    }
}

extern "C" cudaError_t softmax_rows(const float* input, float* output, int rows, long long cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    int threads = 128;
    softmax_kernel<<<(rows + threads - 1) / threads, threads, 0, stream>>>(input, output, rows, (size_t)cols);
    return cudaGetLastError();
}
