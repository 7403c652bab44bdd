// Online softmax accumulator as a struct with an update member: the running maximum and the
// rescaled running sum live in the struct; a thread folds its elements, then writes log-sum-exp.
struct OnlineLSE {
    float mx = -INFINITY;
    float sum = 0.f;
    __device__ void add(float x)
    {
        float mnew = fmaxf(mx, x);
        sum = sum * __expf(mx - mnew) + __expf(x - mnew);
        mx = mnew;
    }
};

__global__ void row_logsumexp(const float* __restrict__ x, float* __restrict__ lse, int cols)
{
    OnlineLSE acc;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc.add(x[(size_t)blockIdx.x * cols + c]);
    __shared__ float m_s[1024], s_s[1024];
    m_s[threadIdx.x] = acc.mx;
    s_s[threadIdx.x] = acc.sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        OnlineLSE total;
        for (int t = 0; t < blockDim.x; ++t) {
            float m = fmaxf(total.mx, m_s[t]);
            total.sum = total.sum * __expf(total.mx - m) + s_s[t] * __expf(m_s[t] - m);
            total.mx = m;
        }
        lse[blockIdx.x] = total.mx + __logf(total.sum);
    }
}
