// Softmax over rows of up to a few thousand columns: one warp per row, running maximum and sum
// updated with a ternary, warp merge of the pair, then a second pass writes the probabilities.
// Uses the precise expf throughout.
__global__ void softmax_warp_row(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    const float* xr = x + (long)row * cols;

    float mx = -INFINITY, sum = 0.0f;
    for (int c = lane; c < cols; c += 32) {
        float v = xr[c];
        float nm = v > mx ? v : mx;
        sum = sum * expf(mx - nm) + expf(v - nm);
        mx = nm;
    }
    #pragma unroll
    for (int off = 16; off; off >>= 1) {
        float m2 = __shfl_down_sync(0xffffffff, mx, off);
        float s2 = __shfl_down_sync(0xffffffff, sum, off);
        float nm = m2 > mx ? m2 : mx;
        sum = sum * expf(mx - nm) + s2 * expf(m2 - nm);
        mx = nm;
    }
    mx = __shfl_sync(0xffffffff, mx, 0);
    sum = __shfl_sync(0xffffffff, sum, 0);
    float inv = 1.0f / sum;
    for (int c = lane; c < cols; c += 32)
        y[(long)row * cols + c] = expf(xr[c] - mx) * inv;
}
