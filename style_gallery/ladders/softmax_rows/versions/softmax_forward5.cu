#include <cuda_runtime.h>
#include <float.h>
#include <math.h>

// kernel 5: one sweep for the statistics. Every thread keeps a running max and a sum rescaled
// whenever the max grows; the (max, sum) pairs of the threads are merged by one operator, inside
// the warp (shuffles) and across warps.
struct SoftmaxParams {
    float m;  // running maximum
    float d;  // sum of exp(x - m)
};

__device__ __forceinline__ SoftmaxParams reduce_md_op(SoftmaxParams a, SoftmaxParams b) {
    bool a_bigger = (a.m > b.m);
    SoftmaxParams bigger_m = a_bigger ? a : b;
    SoftmaxParams smaller_m = a_bigger ? b : a;
    SoftmaxParams res;
    res.d = bigger_m.d + smaller_m.d * expf(smaller_m.m - bigger_m.m);
    res.m = bigger_m.m;
    return res;
}

__device__ SoftmaxParams warpReduceMD(SoftmaxParams val) {
    for (int offset = 16; offset > 0; offset /= 2) {
        SoftmaxParams other;
        other.m = __shfl_xor_sync(0xFFFFFFFF, val.m, offset);
        other.d = __shfl_xor_sync(0xFFFFFFFF, val.d, offset);
        val = reduce_md_op(val, other);
    }
    return val;
}

__global__ void softmax_forward_kernel5(float* out, const float* inp, int N, int C) {
    __shared__ SoftmaxParams partial[32];
    int idx = blockIdx.x;
    int tid = threadIdx.x;
    int warpId = threadIdx.x / 32;
    int laneId = threadIdx.x % 32;
    int warpsPerBlock = blockDim.x / 32;
    const float* x = inp + (size_t)idx * C;

    float maxval = -FLT_MAX;  // not -INFINITY: merging two empty pairs must not give inf - inf
    float sumval = 0.0f;
    for (int i = tid; i < C; i += blockDim.x) {
        float v = x[i];
        if (v > maxval) {
            float maxval_prev = maxval;
            maxval = v;
            sumval = sumval * expf(maxval_prev - maxval) + 1.0f;
        } else {
            sumval += expf(v - maxval);
        }
    }
    SoftmaxParams md;
    md.m = maxval;
    md.d = sumval;
    md = warpReduceMD(md);
    if (laneId == 0) partial[warpId] = md;
    __syncthreads();
    if (tid == 0) {
        SoftmaxParams total = partial[0];
        for (int i = 1; i < warpsPerBlock; i++) {
            total = reduce_md_op(total, partial[i]);
        }
        partial[0] = total;
    }
    __syncthreads();
    float offset = partial[0].m;
    float norm = 1.0f / partial[0].d;

    for (int i = tid; i < C; i += blockDim.x) {
        out[(size_t)idx * C + i] = expf(x[i] - offset) * norm;
    }
}

extern "C" cudaError_t softmax_forward(const float* inp, float* out, int N, int C, cudaStream_t stream) {
    const int block_size = 256;
    softmax_forward_kernel5<<<N, block_size, 0, stream>>>(out, inp, N, C);
    return cudaGetLastError();
}
