// klineage-step: mechanism=unroll
#include <cuda_runtime.h>
#include <math.h>

// Example 6: unroll the column loops; the compiler is told the block size it will run with.
#define THREADS 256

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffff, v, offset);
    return v;
}

// The block's total, valid in thread 0. `shared` holds one float per warp.
__device__ float block_sum(float v, float* shared) {
    int lane = threadIdx.x & 31;
    int wid = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) shared[wid] = v;
    __syncthreads();
    v = (threadIdx.x < blockDim.x / 32) ? shared[lane] : 0.0f;
    if (wid == 0) v = warp_sum(v);
    return v;
}

__global__ void __launch_bounds__(THREADS) layernorm_kernel(const float* x, const float* gamma,
                                                           const float* beta, float* y, int rows, int cols) {
    __shared__ float buf[32];
    __shared__ float s_mean, s_inv_std;
    int row = blockIdx.x;
    int tid = threadIdx.x;
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;

    float sum = 0.0f;
    for (int base = tid; base < cols; base += 4 * blockDim.x) {
        for (int k = 0; k < 4; ++k) {
            int c = base + k * blockDim.x;
            if (c < cols) sum += __ldg(xr + c);
        }
    }
    sum = block_sum(sum, buf);
    if (tid == 0) s_mean = sum / cols;
    __syncthreads();
    float mean = s_mean;

    float sq = 0.0f;
    for (int base = tid; base < cols; base += 4 * blockDim.x) {
        for (int k = 0; k < 4; ++k) {
            int c = base + k * blockDim.x;
            if (c < cols) {
                float d = __ldg(xr + c) - mean;
                sq += d * d;
            }
        }
    }
    sq = block_sum(sq, buf);
    if (tid == 0) s_inv_std = 1.0f / sqrtf(sq / cols + 1e-5f);
    __syncthreads();
    float inv_std = s_inv_std;

    for (int base = tid; base < cols; base += 4 * blockDim.x) {
        for (int k = 0; k < 4; ++k) {
            int c = base + k * blockDim.x;
            if (c < cols) yr[c] = (__ldg(xr + c) - mean) * inv_std * gamma[c] + beta[c];
        }
    }
}

extern "C" cudaError_t layernorm_fwd(const float* x, const float* gamma, const float* beta, float* y,
                                     int rows, int cols, cudaStream_t stream) {
    layernorm_kernel<<<rows, THREADS, 0, stream>>>(x, gamma, beta, y, rows, cols);
    return cudaGetLastError();
}
