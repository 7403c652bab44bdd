// 256-bin histogram of bytes: per-block bins in shared memory updated with shared atomics over a
// grid-stride loop of uchar4 reads, then merged into the global histogram.
__global__ void histo256(const uchar4* __restrict__ data, unsigned* __restrict__ hist, size_t n4)
{
    __shared__ unsigned bins[256];
    for (int b = threadIdx.x; b < 256; b += blockDim.x) bins[b] = 0;
    __syncthreads();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)blockDim.x * gridDim.x) {
        uchar4 v = data[i];
        atomicAdd(&bins[v.x], 1u);
        atomicAdd(&bins[v.y], 1u);
        atomicAdd(&bins[v.z], 1u);
        atomicAdd(&bins[v.w], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
        if (bins[b]) atomicAdd(&hist[b], bins[b]);
}
