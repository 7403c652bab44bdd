#include <cuda_runtime.h>
#include <math.h>

__device__ __forceinline__ float warpReduceMax(float val) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
        val = fmaxf(val, __shfl_xor_sync(0xffffffff, val, offset));
    return val;
}

__device__ __forceinline__ float warpReduceSum(float val) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
        val += __shfl_xor_sync(0xffffffff, val, offset);
    return val;
}

// the running max and sum, updated with four values at once
__device__ __forceinline__ void online_update4(float& mx, float& sum, float4 v) {
    float mx_prev = mx;
    mx = fmaxf(mx, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    sum = sum * __expf(mx_prev - mx) + ((__expf(v.x - mx) + __expf(v.y - mx)) + (__expf(v.z - mx) + __expf(v.w - mx)));
}

// final: float4 sweeps when the row width and both bases allow 16-byte accesses, v7 otherwise.
template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) softmax_block(const float* __restrict x, float* __restrict y, int rows, int cols) {
    __shared__ float red[BLOCK / 32];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    int lane = tid % 32, wid = tid / 32;
    const float* in = x + (size_t)row * cols;
    float* out = y + (size_t)row * cols;

    bool vec = (cols % 4 == 0) && (((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(y)) & 15) == 0);
    const float4* in4 = reinterpret_cast<const float4*>(in);
    float4* out4 = reinterpret_cast<float4*>(out);

    float mx = -INFINITY, sum = 0.f;
    if (vec) {
        for (int j = tid; j < cols / 4; j += BLOCK) online_update4(mx, sum, in4[j]);
    } else {
        for (int j = tid; j < cols; j += BLOCK) {
            float v = in[j];
            float mx_prev = mx;
            mx = fmaxf(mx, v);
            sum = sum * __expf(mx_prev - mx) + __expf(v - mx);
        }
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

    if (vec) {
        for (int j = tid; j < cols / 4; j += BLOCK) {
            float4 v = __ldcs(in4 + j);
            float4 r;
            r.x = __expf(v.x - row_max) * inv;
            r.y = __expf(v.y - row_max) * inv;
            r.z = __expf(v.z - row_max) * inv;
            r.w = __expf(v.w - row_max) * inv;
            __stcs(out4 + j, r);
        }
    } else {
        for (int j = tid; j < cols; j += BLOCK) __stcs(out + j, __expf(__ldcs(in + j) - row_max) * inv);
    }
}

extern "C" cudaError_t softmax_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    softmax_block<256><<<rows, 256, 0, stream>>>(x, y, rows, cols);
    return cudaGetLastError();
}
