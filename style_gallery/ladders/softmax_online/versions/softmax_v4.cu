#include <cuda_runtime.h>
#include <math.h>

__device__ __forceinline__ float warpReduceMax(float val) {
    for (int offset = 16; offset > 0; offset /= 2)
        val = fmaxf(val, __shfl_xor_sync(0xffffffff, val, offset));
    return val;
}

__device__ __forceinline__ float warpReduceSum(float val) {
    for (int offset = 16; offset > 0; offset /= 2)
        val += __shfl_xor_sync(0xffffffff, val, offset);
    return val;
}

// v4: online softmax. Each thread keeps a running max and a sum rescaled whenever the max moves,
// so max and sum come from one sweep; the block then agrees on the max and rescales the sums.
template <int BLOCK>
__global__ void softmax_block(const float* __restrict x, float* __restrict y, int rows, int cols) {
    __shared__ float red[BLOCK / 32];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    int lane = tid % 32, wid = tid / 32;
    const float* in = x + (size_t)row * cols;
    float* out = y + (size_t)row * cols;

    float mx = -INFINITY, sum = 0.f;
    for (int j = tid; j < cols; j += BLOCK) {
        float v = in[j];
        float mx_prev = mx;
        mx = fmaxf(mx, v);
        sum = sum * __expf(mx_prev - mx) + __expf(v - mx);
    }

    float wmax = warpReduceMax(mx);
    if (lane == 0) red[wid] = wmax;
    __syncthreads();
    float row_max = warpReduceMax(lane < BLOCK / 32 ? red[lane] : -INFINITY);
    __syncthreads();

    sum = mx == -INFINITY ? 0.f : sum * __expf(mx - row_max);
    sum = warpReduceSum(sum);
    if (lane == 0) red[wid] = sum;
    __syncthreads();
    float inv = 1.0f / warpReduceSum(lane < BLOCK / 32 ? red[lane] : 0.f);

    for (int j = tid; j < cols; j += BLOCK) out[j] = __expf(in[j] - row_max) * inv;
}

extern "C" cudaError_t softmax_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    softmax_block<256><<<rows, 256, 0, stream>>>(x, y, rows, cols);
    return cudaGetLastError();
}
