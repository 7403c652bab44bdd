// Rotary position embedding applied in place to (even, odd) pairs: angles from a frequency table,
// sine and cosine from the fast hardware approximations (__sincosf).
__global__ void rope_inplace(float2* __restrict__ qk, const float* __restrict__ inv_freq, int seq, int half_dim)
{
    const int pos = blockIdx.x;
    const int head = blockIdx.y;
    for (int j = threadIdx.x; j < half_dim; j += blockDim.x) {
        float s, c;
        __sincosf(pos * inv_freq[j], &s, &c);
        float2* p = qk + ((size_t)head * seq + pos) * half_dim + j;
        float2 v = *p;
        *p = make_float2(v.x * c - v.y * s, v.x * s + v.y * c);
    }
}
