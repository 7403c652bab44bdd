// conv2d naive: 3 x 3, stride 1, padding 1, fp16 NHWC in and out, fp32 accumulation. One thread per
// output element (pixel, filter) walks the 3 x 3 x C window reading x and weight straight from
// global memory: no shared memory, no register tiling, no tensor cores. The start of the ladder.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef CONV_BLOCK
#define CONV_BLOCK 128
#endif

__global__ void conv2d_naive_kernel(const __half* x, const __half* w, __half* out, int N, int H, int W, int C, int F) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long total = (long long)N * H * W * F;
    if (i >= total) return;
    int f = (int)(i % F);
    long long p = i / F;
    int ow = (int)(p % W), oh = (int)((p / W) % H), n = (int)(p / ((long long)W * H));
    float acc = 0.0f;
    for (int r = 0; r < 3; ++r) {
        int ih = oh + r - 1;
        if (ih < 0 || ih >= H) continue;
        for (int s = 0; s < 3; ++s) {
            int iw = ow + s - 1;
            if (iw < 0 || iw >= W) continue;
            for (int c = 0; c < C; ++c)
                acc += __half2float(x[(((long long)n * H + ih) * W + iw) * C + c]) *
                       __half2float(w[((long long)f * 9 + r * 3 + s) * C + c]);
        }
    }
    out[i] = __float2half(acc);
}

extern "C" cudaError_t conv2d(const __half* x, const __half* weight, __half* out, int N, int H, int W, int C, int F,
                              cudaStream_t stream) {
    long long total = (long long)N * H * W * F;
    if (total <= 0) return cudaSuccess;
    conv2d_naive_kernel<<<(unsigned)((total + CONV_BLOCK - 1) / CONV_BLOCK), CONV_BLOCK, 0, stream>>>(x, weight, out, N, H,
                                                                                                 W, C, F);
    return cudaGetLastError();
}
