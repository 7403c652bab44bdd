// Block sum with a shared-memory tree: each thread first adds two elements per step of a
// grid-stride loop, the block then halves its active threads per step, and the last 32 threads
// finish through a volatile pointer without barriers (the classic pre-shuffle form).
template <unsigned kThreads>
__device__ void last_warp_fold(volatile float* buf, unsigned t)
{
    if (kThreads >= 64) buf[t] += buf[t + 32];
    if (kThreads >= 32) buf[t] += buf[t + 16];
    if (kThreads >= 16) buf[t] += buf[t + 8];
    if (kThreads >= 8) buf[t] += buf[t + 4];
    if (kThreads >= 4) buf[t] += buf[t + 2];
    if (kThreads >= 2) buf[t] += buf[t + 1];
}

template <unsigned kThreads>
__global__ void block_tree_sum(const float* in, float* partial_out, unsigned count)
{
    extern __shared__ float buf[];
    const unsigned t = threadIdx.x;
    const unsigned stride = 2 * kThreads * gridDim.x;
    float running = 0.f;
    for (unsigned idx = blockIdx.x * 2 * kThreads + t; idx < count; idx += stride) {
        running += in[idx];
        if (idx + kThreads < count) running += in[idx + kThreads];
    }
    buf[t] = running;
    __syncthreads();

    for (unsigned half = kThreads / 2; half > 32; half >>= 1) {
        if (t < half) buf[t] = running = running + buf[t + half];
        __syncthreads();
    }
    if (t < 32) last_warp_fold<kThreads>(buf, t);
    if (t == 0) partial_out[blockIdx.x] = buf[0];
}

void tree_sum(const float* in, float* partials, unsigned count, cudaStream_t stream)
{
    block_tree_sum<256><<<264, 256, 256 * sizeof(float), stream>>>(in, partials, count);
}
