// Row argmax: each lane scans its strided elements keeping (value, index), then the warp merges the
// pairs with xor shuffles, ties resolved to the lower index, so every lane ends with the row's
// argmax.
__global__ void row_argmax(const float* __restrict__ x, int* __restrict__ idx_out, int cols)
{
    const float* r = x + (size_t)blockIdx.x * cols;
    float best = -INFINITY;
    int best_i = 0;
    for (int c = threadIdx.x; c < cols; c += 32) {
        float v = r[c];
        if (v > best) { best = v; best_i = c; }
    }
    for (int lm = 16; lm > 0; lm >>= 1) {
        float ov = __shfl_xor_sync(0xffffffff, best, lm);
        int oi = __shfl_xor_sync(0xffffffff, best_i, lm);
        if (ov > best || (ov == best && oi < best_i)) {
            best = ov;
            best_i = oi;
        }
    }
    if (threadIdx.x == 0) idx_out[blockIdx.x] = best_i;
}
