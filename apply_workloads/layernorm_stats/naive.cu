// LayerNorm forward over each row of fp32 inp [N, C], writing the output and each row's mean and
// reciprocal standard deviation (for a backward pass). Outputs first; eps a constant declared before the
// bounds check; the body inside `if (n < N)`; the statistics divided after their loops.
#include <cuda_runtime.h>

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int N, int C) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    const float eps = 1e-5f;
    if (n < N) {
        const float* row_in = inp + n * C;
        float mu = 0.0f;
        for (int c = 0; c < C; c++) {
            mu += row_in[c];
        }
        mu = mu / C;
        float var = 0.0f;
        for (int c = 0; c < C; c++) {
            float shifted = row_in[c] - mu;
            var += shifted * shifted;
        }
        var = var / C;
        float s = 1.0f / sqrtf(var + eps);
        float* row_out = out + n * C;
        for (int c = 0; c < C; c++) {
            float normed = s * (row_in[c] - mu);
            row_out[c] = normed * weight[c] + bias[c];
        }
        mean[n] = mu;
        rstd[n] = s;
    }
}

extern "C" cudaError_t layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                         const float* bias, int N, int C, cudaStream_t stream) {
    const int block_size = 256;
    const int grid_size = (N + block_size - 1) / block_size;
    layernorm_forward_kernel<<<grid_size, block_size, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C);
    return cudaGetLastError();
}
