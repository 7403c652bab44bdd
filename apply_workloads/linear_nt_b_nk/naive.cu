// A linear layer without bias: output[b][o] = sum_i input[b][i] * weight[o][i] (input: batch_size x
// in_features, weight: out_features x in_features as nn.Linear stores it, output: batch_size x
// out_features; fp32). One thread per output, the feature along threadIdx.x.
#include <cuda_runtime.h>

__global__ void linear_forward_kernel(const float* input, const float* weight, float* output, int batch_size,
                                      int in_features, int out_features) {
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    const int b = blockIdx.y;
    if (o >= out_features || b >= batch_size) return;
    float y = 0.0f;
    for (int i = 0; i < in_features; ++i) y += input[b * in_features + i] * weight[o * in_features + i];
    output[b * out_features + o] = y;
}

extern "C" cudaError_t linear_forward(const float* input, const float* weight, float* output, int batch_size,
                                      int in_features, int out_features, cudaStream_t stream) {
    const int threads = 128;
    dim3 grid((out_features + threads - 1) / threads, batch_size);
    linear_forward_kernel<<<grid, threads, 0, stream>>>(input, weight, output, batch_size, in_features,
                                                        out_features);
    return cudaGetLastError();
}
