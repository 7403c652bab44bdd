// Naive start kernel of the held-out LayerNorm instances:
//   out[r, c] = (x[r, c] - mean_r) * rsqrt(var_r + eps) * weight[c] + bias[c], mean_r and var_r (biased)
// over row r; bf16 in and out, fp32 math.
// One thread per row, three serial passes over the row with scalar loads (the mean, the variance as the
// mean of squared deviations, then the output). No vectorization, no cooperation between threads. Each
// element is read before its output is written, so out may alias x.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#ifndef LAYERNORM_BLOCK
#define LAYERNORM_BLOCK 256  // threads per block, one row each
#endif

__global__ void layernorm_naive_kernel(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                       const __nv_bfloat16* bias, __nv_bfloat16* out, int rows, int cols,
                                       float eps) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const __nv_bfloat16* xr = x + (long long)r * cols;
    __nv_bfloat16* orow = out + (long long)r * cols;
    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) sum += __bfloat162float(xr[c]);
    float mean = sum / (float)cols;
    float sq = 0.0f;
    for (int c = 0; c < cols; ++c) {
        float d = __bfloat162float(xr[c]) - mean;
        sq += d * d;
    }
    float rstd = 1.0f / sqrtf(sq / (float)cols + eps);
    for (int c = 0; c < cols; ++c) {
        float y = (__bfloat162float(xr[c]) - mean) * rstd * __bfloat162float(weight[c]) + __bfloat162float(bias[c]);
        orow[c] = __float2bfloat16(y);
    }
}

extern "C" cudaError_t layernorm(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias,
                                 __nv_bfloat16* out, int rows, int cols, float eps, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    int block = LAYERNORM_BLOCK;
    int grid = (rows + block - 1) / block;
    layernorm_naive_kernel<<<grid, block, 0, stream>>>(x, weight, bias, out, rows, cols, eps);
    return cudaGetLastError();
}
