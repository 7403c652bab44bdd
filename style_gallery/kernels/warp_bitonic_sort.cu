// Sorts 32 keys per warp in registers with a bitonic network: every compare-exchange swaps with
// lane ^ j through __shfl_xor_sync and keeps the min or the max depending on the lane's direction.
__global__ void warp_sort32(float* data)
{
    const int lane = threadIdx.x & 31;
    float* seg = data + (blockIdx.x * blockDim.x + threadIdx.x - lane);
    float key = seg[lane];
    for (int k = 2; k <= 32; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            float other = __shfl_xor_sync(0xffffffff, key, j);
            bool ascending = ((lane & k) == 0);
            bool lower = ((lane & j) == 0);
            key = (ascending == lower) ? fminf(key, other) : fmaxf(key, other);
        }
    }
    seg[lane] = key;
}
