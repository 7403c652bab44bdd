// Sigmoid and softplus with the math routed through project macros that pick the fast intrinsics
// (FAST_EXP, FAST_DIV), a common switch in codebases that toggle precision at build time.
#define FAST_EXP(x) __expf(x)
#define FAST_DIV(a, b) __fdividef((a), (b))

__global__ void sigmoid_softplus(const float* __restrict__ x, float* __restrict__ sig, float* __restrict__ sp, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        float e = FAST_EXP(-v);
        sig[i] = FAST_DIV(1.0f, 1.0f + e);
        sp[i] = v > 20.f ? v : log1pf(FAST_EXP(v));
    }
}
