// Counts matches per block: warps sum their 0/1 flags with the hardware warp reduction
// (__reduce_add_sync, sm_80+), one atomic per warp.
__global__ void count_equal(const int* __restrict__ keys, int needle, unsigned int* __restrict__ count, int n)
{
    unsigned int local = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        local += keys[i] == needle;
    unsigned int warp_total = __reduce_add_sync(0xffffffffu, local);
    if ((threadIdx.x & 31) == 0 && warp_total)
        atomicAdd(count, warp_total);
}
