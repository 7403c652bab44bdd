// pitfall: 5
// expect: GUARD_REJECTED
// dynamic: INCORRECT wrong_values
// why: caches results keyed by the x pointer and shape; a repeated pointer gets the cached sums copied to out, even when the data changed
#include <cuda_runtime.h>

// A correct reduction: one warp per row, lanes stride the row, shuffle reduction.
__global__ void rs_kernel(const float* x, float* out, int rows, int cols) {
    long long r = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) s += x[r * cols + c];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) out[r] = s;
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    static const float* last_x = nullptr;
    static int last_rows = -1, last_cols = -1;
    static float* cache = nullptr;
    static size_t cache_rows = 0;
    if (x == last_x && rows == last_rows && cols == last_cols && cache) {
        cudaMemcpyAsync(out, cache, sizeof(float) * rows, cudaMemcpyDeviceToDevice, stream);
        return cudaGetLastError();
    }
    if ((size_t)rows > cache_rows) {
        if (cache) cudaFree(cache);
        cudaMalloc(&cache, sizeof(float) * rows);
        cache_rows = rows;
    }
    rs_kernel<<<(rows + 7) / 8, 256, 0, stream>>>(x, out, rows, cols);
    cudaMemcpyAsync(cache, out, sizeof(float) * rows, cudaMemcpyDeviceToDevice, stream);
    last_x = x; last_rows = rows; last_cols = cols;
    return cudaGetLastError();
}
