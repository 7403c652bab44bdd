// Block max-reduction configured through a traits struct: the per-thread item count is a static
// constexpr member (Config::kItemsPerThread), items are loaded into registers first, then reduced
// across the warp (xor shuffles in an unrolled loop) and across warps with shared memory.
struct Config {
    static constexpr int kThreads = 256;
    static constexpr int kItemsPerThread = 8;
};

template <typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads) block_max(const float* __restrict__ in, float* __restrict__ out, int n)
{
    __shared__ float warp_max[Cfg::kThreads / 32];
    float items[Cfg::kItemsPerThread];
    const int base = blockIdx.x * Cfg::kThreads * Cfg::kItemsPerThread + threadIdx.x;
#pragma unroll
    for (int i = 0; i < Cfg::kItemsPerThread; ++i) {
        int idx = base + i * Cfg::kThreads;
        items[i] = idx < n ? in[idx] : -INFINITY;
    }
    float m = items[0];
#pragma unroll
    for (int i = 1; i < Cfg::kItemsPerThread; ++i) m = fmaxf(m, items[i]);
#pragma unroll
    for (int s = 16; s > 0; s /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, s));
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < Cfg::kThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
        out[blockIdx.x] = m;
    }
}

template __global__ void block_max<Config>(const float*, float*, int);
