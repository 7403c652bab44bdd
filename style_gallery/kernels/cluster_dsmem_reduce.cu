// Row sums of long rows split over a cluster of 4 blocks: each block reduces its slice (warp
// shuffles, then shared memory), then block 0 of the cluster reads the other blocks' partials
// straight out of their shared memory (distributed shared memory) after a cluster barrier.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

constexpr int kClusterSize = 4;

__global__ void __cluster_dims__(kClusterSize, 1, 1)
cluster_row_sum(const float* __restrict__ x, float* __restrict__ out, int cols)
{
    __shared__ float partial[32];
    __shared__ float block_total;
    cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = cluster.block_rank();
    const int row = blockIdx.x / kClusterSize;
    const int slice = cols / kClusterSize;
    const float* src = x + (size_t)row * cols + rank * slice;

    float v = 0.f;
    for (int i = threadIdx.x; i < slice; i += blockDim.x) v += src[i];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.f;
        for (int w = 0; w < (int)blockDim.x / 32; ++w) t += partial[w];
        block_total = t;
    }
    cluster.sync();
    if (rank == 0 && threadIdx.x == 0) {
        float total = 0.f;
        for (unsigned r = 0; r < kClusterSize; ++r)
            total += *cluster.map_shared_rank(&block_total, r);
        out[row] = total;
    }
    cluster.sync();
}
