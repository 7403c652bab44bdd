// Inclusive prefix sum of each 32-element segment with __shfl_up_sync (Kogge-Stone), the segment
// total broadcast from lane 31 with __shfl_sync and stored for a later pass.
__global__ void segment_scan(const float* __restrict__ in, float* __restrict__ out, float* __restrict__ totals, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x & 31;
    float v = i < n ? in[i] : 0.f;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        float up = __shfl_up_sync(0xffffffff, v, d);
        if (lane >= d) v += up;
    }
    if (i < n) out[i] = v;
    float total = __shfl_sync(0xffffffff, v, 31);
    if (lane == 0) totals[i >> 5] = total;
}
