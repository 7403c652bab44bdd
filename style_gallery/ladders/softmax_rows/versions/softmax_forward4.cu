#include <cuda_runtime.h>
#include <math.h>

// kernel 4: the shared-memory trees give way to warp shuffles: each warp reduces its values in
// registers, lane 0 of every warp parks the result in shared memory, and warp 0 finishes.
__device__ float warpReduceMax(float val) {
    for (int offset = 16; offset > 0; offset /= 2) {
        val = fmaxf(val, __shfl_xor_sync(0xFFFFFFFF, val, offset));
    }
    return val;
}

__device__ float warpReduceSum(float val) {
    for (int offset = 16; offset > 0; offset /= 2) {
        val += __shfl_xor_sync(0xFFFFFFFF, val, offset);
    }
    return val;
}

__global__ void softmax_forward_kernel4(float* out, const float* inp, int N, int C) {
    __shared__ float maxvals[32];
    __shared__ float sumvals[32];
    int idx = blockIdx.x;
    int tid = threadIdx.x;
    int warpId = threadIdx.x / 32;
    int laneId = threadIdx.x % 32;
    int warpsPerBlock = blockDim.x / 32;
    const float* x = inp + (size_t)idx * C;

    float maxval = -INFINITY;
    for (int i = tid; i < C; i += blockDim.x) {
        maxval = fmaxf(maxval, x[i]);
    }
    maxval = warpReduceMax(maxval);
    if (laneId == 0) maxvals[warpId] = maxval;
    __syncthreads();
    if (tid == 0) {
        float val = maxvals[0];
        for (int i = 1; i < warpsPerBlock; i++) {
            val = fmaxf(val, maxvals[i]);
        }
        maxvals[0] = val;
    }
    __syncthreads();
    float offset = maxvals[0];

    float sumval = 0.0f;
    for (int i = tid; i < C; i += blockDim.x) {
        sumval += expf(x[i] - offset);
    }
    sumval = warpReduceSum(sumval);
    if (laneId == 0) sumvals[warpId] = sumval;
    __syncthreads();
    if (tid == 0) {
        float val = sumvals[0];
        for (int i = 1; i < warpsPerBlock; ++i) {
            val += sumvals[i];
        }
        sumvals[0] = val;
    }
    __syncthreads();
    float sum = sumvals[0];

    for (int i = tid; i < C; i += blockDim.x) {
        out[(size_t)idx * C + i] = expf(x[i] - offset) / sum;
    }
}

extern "C" cudaError_t softmax_forward(const float* inp, float* out, int N, int C, cudaStream_t stream) {
    const int block_size = 256;
    softmax_forward_kernel4<<<N, block_size, 0, stream>>>(out, inp, N, C);
    return cudaGetLastError();
}
