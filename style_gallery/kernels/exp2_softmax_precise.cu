// Row softmax with exp2f on log2(e)-scaled inputs (the precise exp2f: CUDA implements it with the
// hardware ex2 at 2 ulp, no fast-math flag involved) and a block-wide max and sum through shared
// memory trees.
__global__ void softmax_exp2(const float* __restrict__ x, float* __restrict__ y, int cols)
{
    __shared__ float red[256];
    const float kLog2e = 1.4426950408889634f;
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;

    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();

    float sum = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += exp2f((xr[c] - m) * kLog2e);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = 1.f / red[0];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = exp2f((xr[c] - m) * kLog2e) * inv;
}
