// Stream compaction counter with warp-aggregated atomics: the active lanes elect a leader with
// __activemask / __ffs, the leader adds the warp's __popc count once, and the offset is broadcast
// back with __shfl_sync. Nothing is reduced through shuffles.
__global__ void compact_positive(const float* __restrict__ in, float* __restrict__ out, int* __restrict__ count, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float v = in[i];
        if (v > 0.f) {
            unsigned active = __activemask();
            int leader = __ffs(active) - 1;
            int lane = threadIdx.x & 31;
            int base = 0;
            if (lane == leader) base = atomicAdd(count, __popc(active));
            base = __shfl_sync(active, base, leader);
            int rank = __popc(active & ((1u << lane) - 1));
            out[base + rank] = v;
        }
    }
}
