// Sum over the last dimension, [batch_size, dim] -> [batch_size], fp32. One thread per row; the body
// sits inside the bounds check and indexes through a local offset, as many first kernels do.
#include <cuda_runtime.h>

__global__ void row_sum_kernel(const float* input, float* output, int batch_size, int dim) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < batch_size) {
        float sum = 0.0f;
        for (int j = 0; j < dim; j++) {
            int in_idx = idx * dim + j;
            sum += input[in_idx];
        }
        output[idx] = sum;
    }
}

extern "C" cudaError_t sum_last_dim(const float* input, float* output, int batch_size, int dim, cudaStream_t stream) {
    const int threads = 256;
    const int blocks = (batch_size + threads - 1) / threads;
    row_sum_kernel<<<blocks, threads, 0, stream>>>(input, output, batch_size, dim);
    return cudaGetLastError();
}
