// RMSNorm over each token of fp32 x [num_tokens, hidden_size] with a weight. One thread per token,
// the body inside its bounds check, every element indexed from the token's flat offset.
#include <cuda_runtime.h>

__global__ void rms_norm_kernel(const float* x, const float* w, float* y, int num_tokens, int hidden_size,
                                float eps) {
    int token = blockIdx.x * blockDim.x + threadIdx.x;
    if (token < num_tokens) {
        float ss = 0.f;
        for (int h = 0; h < hidden_size; ++h) {
            float v = x[token * hidden_size + h];
            ss += v * v;
        }
        float scale = rsqrtf(ss / hidden_size + eps);
        for (int h = 0; h < hidden_size; ++h) {
            y[token * hidden_size + h] = x[token * hidden_size + h] * scale * w[h];
        }
    }
}

extern "C" cudaError_t rms_norm(const float* x, const float* w, float* y, int num_tokens, int hidden_size, float eps,
                                cudaStream_t stream) {
    rms_norm_kernel<<<(num_tokens + 255) / 256, 256, 0, stream>>>(x, w, y, num_tokens, hidden_size, eps);
    return cudaGetLastError();
}
