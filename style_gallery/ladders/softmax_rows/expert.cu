#include <cuda_runtime.h>
#include <float.h>
#include <math.h>

// kernel 7: kernel 6 with streaming cache hints. The second sweep is the row's last read and the
// output is never read back here, so both bypass the cache's keep-me policy (ld.global.cs / st.global.cs).
struct SoftmaxParams {
    float m;  // running maximum
    float d;  // sum of exp(x - m)
};

__device__ __forceinline__ SoftmaxParams reduce_md_op(SoftmaxParams a, SoftmaxParams b) {
    bool a_bigger = (a.m > b.m);
    SoftmaxParams bigger_m = a_bigger ? a : b;
    SoftmaxParams smaller_m = a_bigger ? b : a;
    SoftmaxParams res;
    res.d = bigger_m.d + smaller_m.d * __expf(smaller_m.m - bigger_m.m);
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

__global__ void softmax_forward_kernel7(float* out, const float* inp, int N, int C) {
    __shared__ SoftmaxParams partial[32];
    int idx = blockIdx.x;
    int tid = threadIdx.x;
    int warpId = threadIdx.x / 32;
    int laneId = threadIdx.x % 32;
    int warpsPerBlock = blockDim.x / 32;
    const float4* x = reinterpret_cast<const float4*>(inp + (size_t)idx * C);
    float4* y = reinterpret_cast<float4*>(out + (size_t)idx * C);
    int C4 = C / 4;

    float maxval = -FLT_MAX;  // not -INFINITY: merging two empty pairs must not give inf - inf
    float sumval = 0.0f;
    for (int i = tid; i < C4; i += blockDim.x) {
        float4 v4 = x[i];
        float vals[4] = {v4.x, v4.y, v4.z, v4.w};
        for (int k = 0; k < 4; k++) {
            float v = vals[k];
            if (v > maxval) {
                float maxval_prev = maxval;
                maxval = v;
                sumval = sumval * __expf(maxval_prev - maxval) + 1.0f;
            } else {
                sumval += __expf(v - maxval);
            }
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

    for (int i = tid; i < C4; i += blockDim.x) {
        float4 v = __ldcs(x + i);
        float4 r;
        r.x = __expf(v.x - offset) * norm;
        r.y = __expf(v.y - offset) * norm;
        r.z = __expf(v.z - offset) * norm;
        r.w = __expf(v.w - offset) * norm;
        __stcs(y + i, r);
    }
}

extern "C" cudaError_t softmax_forward(const float* inp, float* out, int N, int C, cudaStream_t stream) {
    const int block_size = 256;
    softmax_forward_kernel7<<<N, block_size, 0, stream>>>(out, inp, N, C);
    return cudaGetLastError();
}
