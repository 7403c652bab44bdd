// Half-precision GEMV, one warp per output row: 8 halves per 16-byte load of both the matrix row
// and the vector (uint4 through __ldg), partial dot products folded with a device lambda that
// runs the xor butterfly.
#include <cuda_fp16.h>

__global__ void gemv_h(const half *__restrict__ W, const half *__restrict__ x, half *__restrict__ y, int rows, int cols)
{
    auto warp_allreduce = [](float v) {
#pragma unroll
        for (int m = 16; m >= 1; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
        return v;
    };
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const uint4* wr = reinterpret_cast<const uint4*>(W + (size_t)row * cols);
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    float acc = 0.f;
    for (int i = lane; i < cols / 8; i += 32) {
        uint4 a = __ldg(wr + i), b = __ldg(xv + i);
        const half2* ah = reinterpret_cast<const half2*>(&a);
        const half2* bh = reinterpret_cast<const half2*>(&b);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            float2 p = __half22float2(__hmul2(ah[k], bh[k]));
            acc += p.x + p.y;
        }
    }
    acc = warp_allreduce(acc);
    if (lane == 0) y[row] = __float2half(acc);
}
