// Softplus and GELU (erf form) in full precision: expf, log1pf, erff and a true division. The
// inputs are const __restrict__, so the compiler may route their loads through the read-only path
// on its own; the author asked for no cache hint.
__global__ void softplus_gelu(const float* __restrict__ x, float* __restrict__ sp, float* __restrict__ ge,
                              int n, float beta)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    float bv = beta * v;
    sp[i] = bv > 20.f ? v : log1pf(expf(bv)) / beta;
    ge[i] = 0.5f * v * (1.f + erff(v * 0.70710678f));
}
