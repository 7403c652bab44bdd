// Int4-weight GEMV: each 32-bit word packs 8 weights, read through the read-only cache with __ldg;
// dequantised with a per-group scale and accumulated in fp32; the warp's partial sums are reduced
// with a 4-argument __shfl_down_sync in an unrolled loop.
#include <cuda_fp16.h>
#include <stdint.h>

#define GROUP 128

__global__ void gemv_w4(const uint32_t* __restrict__ qweight, const half* __restrict__ scales,
                        const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    const int row = blockIdx.x * 4 + threadIdx.y;
    if (row >= rows) return;
    const uint32_t* wrow = qweight + (size_t)row * (cols / 8);
    float sum = 0.f;
    for (int w = threadIdx.x; w < cols / 8; w += 32) {
        uint32_t packed = __ldg(wrow + w);
        float s = __half2float(scales[(size_t)row * (cols / GROUP) + (w * 8) / GROUP]);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            int q = (packed >> (4 * j)) & 0xF;
            sum += (q - 8) * s * x[w * 8 + j];
        }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
        sum += __shfl_down_sync(0xffffffff, sum, offset, 32);
    if (threadIdx.x == 0) y[row] = sum;
}
