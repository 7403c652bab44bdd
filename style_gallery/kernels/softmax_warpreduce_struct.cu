// Two-pass row softmax with the reductions packaged as a small library: WarpReduce<T>::Max / ::Sum
// are static member functions, the block combines warps through shared memory, and each thread
// owns kItemsPerThread values loaded up front.
template <typename T>
struct WarpReduce {
    static __device__ __forceinline__ T Sum(T v)
    {
#pragma unroll
        for (int offset = warpSize >> 1; offset >= 1; offset >>= 1)
            v += __shfl_down_sync(0xffffffffu, v, offset);
        return v;
    }
    static __device__ __forceinline__ T Max(T v)
    {
#pragma unroll
        for (int offset = warpSize >> 1; offset >= 1; offset >>= 1)
            v = max(v, __shfl_down_sync(0xffffffffu, v, offset));
        return v;
    }
};

template <int kBlock, int kItemsPerThread>
__global__ void softmax_rows(const float* __restrict__ in, float* __restrict__ out, int cols)
{
    __shared__ float scratch[kBlock / 32];
    __shared__ float bcast;
    const float* src = in + (size_t)blockIdx.x * cols;
    float vals[kItemsPerThread];
    float local_max = -3.0e38f;
    for (int it = 0; it < kItemsPerThread; ++it) {
        int c = threadIdx.x + it * kBlock;
        vals[it] = c < cols ? src[c] : -3.0e38f;
        local_max = max(local_max, vals[it]);
    }
    float m = WarpReduce<float>::Max(local_max);
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        float b = scratch[0];
        for (int w = 1; w < kBlock / 32; ++w) b = max(b, scratch[w]);
        bcast = b;
    }
    __syncthreads();
    const float row_max = bcast;
    float local_sum = 0.f;
    for (int it = 0; it < kItemsPerThread; ++it) {
        vals[it] = __expf(vals[it] - row_max);
        local_sum += vals[it];
    }
    float s = WarpReduce<float>::Sum(local_sum);
    __syncthreads();
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float b = 0.f;
        for (int w = 0; w < kBlock / 32; ++w) b += scratch[w];
        bcast = b;
    }
    __syncthreads();
    const float inv = 1.f / bcast;
    for (int it = 0; it < kItemsPerThread; ++it) {
        int c = threadIdx.x + it * kBlock;
        if (c < cols) out[(size_t)blockIdx.x * cols + c] = vals[it] * inv;
    }
}

void softmax(const float* in, float* out, int rows, int cols, cudaStream_t s)
{
    softmax_rows<256, 8><<<rows, 256, 0, s>>>(in, out, cols);
}
