// RMSNorm, a block per row; each pass takes four block-strided columns per step, so four
// independent loads are in flight per thread.
__inline__ __device__ float warp_reduce_sum(float val) {
    for (int offset = 16; offset > 0; offset >>= 1) val += __shfl_xor_sync(0xffffffff, val, offset);
    return val;
}

__global__ void rmsnorm_kernel(float* __restrict__ out, const float* __restrict__ in,
                               const float* __restrict__ weight, int cols, float eps) {
    __shared__ float warp_sums[32];
    __shared__ float s_inv_rms;
    const float* x = in + (size_t)blockIdx.x * cols;
    float* y = out + (size_t)blockIdx.x * cols;

    float ss = 0.0f;
    for (int base = threadIdx.x; base < cols; base += 4 * blockDim.x) {
        for (int k = 0; k < 4; ++k) {
            int c = base + k * blockDim.x;
            if (c < cols) ss += x[c] * x[c];
        }
    }
    ss = warp_reduce_sum(ss);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < blockDim.x / 32 ? warp_sums[threadIdx.x] : 0.0f;
        v = warp_reduce_sum(v);
        if (threadIdx.x == 0) s_inv_rms = 1.0f / sqrtf(v / cols + eps);
    }
    __syncthreads();
    const float inv_rms = s_inv_rms;

    for (int base = threadIdx.x; base < cols; base += 4 * blockDim.x) {
        for (int k = 0; k < 4; ++k) {
            int c = base + k * blockDim.x;
            if (c < cols) y[c] = x[c] * inv_rms * weight[c];
        }
    }
}
