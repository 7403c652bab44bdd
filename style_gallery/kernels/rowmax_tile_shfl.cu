// Row maxima: each lane keeps kItems values in registers (a const int count), the warp tile
// folds them with tile.shfl_down in a helper, and lane 0 writes the row's maximum.
#include <cooperative_groups.h>
#include <cfloat>

namespace cg = cooperative_groups;

template <typename Tile>
__device__ float tile_max(const Tile& t, float v)
{
    for (int offset = t.size() / 2; offset > 0; offset /= 2)
        v = fmaxf(v, t.shfl_down(v, offset));
    return v;
}

__global__ void row_max(const float* __restrict__ in, float* __restrict__ out, int cols)
{
    const int kItems = 8;
    auto warp = cg::tiled_partition<32>(cg::this_thread_block());
    const float* row = in + (size_t)blockIdx.x * cols;

    float vals[kItems];
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
        int c = warp.thread_rank() + i * 32;
        vals[i] = c < cols ? row[c] : -FLT_MAX;
    }
    float m = vals[0];
#pragma unroll
    for (int i = 1; i < kItems; ++i) m = fmaxf(m, vals[i]);

    m = tile_max(warp, m);
    if (warp.thread_rank() == 0) out[blockIdx.x] = m;
}
