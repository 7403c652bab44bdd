// Log-sum-exp of many short rows, a thread per row, in one sweep: the new maximum is written inline
// (fmaxf) where the running sum is rescaled, and stored after it.
#include <math.h>

__global__ void row_logsumexp(const float* __restrict__ x, float* __restrict__ lse, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* r = x + (size_t)row * cols;

    float m = -INFINITY, s = 0.0f;
    for (int c = 0; c < cols; ++c) {
        float v = r[c];
        s = s * expf(m - fmaxf(m, v)) + expf(v - fmaxf(m, v));
        m = fmaxf(m, v);
    }
    lse[row] = m + logf(s);
}
