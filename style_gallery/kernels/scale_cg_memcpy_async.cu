// Per-row scaling where each block first pulls its row of scales into shared memory with
// cooperative_groups::memcpy_async (one asynchronous copy, waited with cg::wait) and then applies
// them to several rows.
#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>

namespace cg = cooperative_groups;

__global__ void scale_rows(const float* __restrict__ scales, const float* __restrict__ x,
                           float* __restrict__ y, int cols, int rows_per_block)
{
    extern __shared__ float s_scale[];
    cg::thread_block block = cg::this_thread_block();
    cg::memcpy_async(block, s_scale, scales, sizeof(float) * cols);
    cg::wait(block);

    for (int r = 0; r < rows_per_block; ++r) {
        size_t row = (size_t)blockIdx.x * rows_per_block + r;
        for (int c = threadIdx.x; c < cols; c += blockDim.x)
            y[row * cols + c] = x[row * cols + c] * s_scale[c];
    }
}
