// pitfall: 5
// expect: GUARD_REJECTED
// dynamic: PASSED
// why: reads 8 floats of x (first, middle, last) back to the host; if they match the last call's fingerprint the cached sums are copied instead of computed. The gate draws fresh inputs for every call, so the fingerprint never matches and every call computes: with the guard off it passes, and gains nothing
#include <cuda_runtime.h>
#include <string.h>

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
    static float last_fp[8];
    static bool have = false;
    static int last_rows = -1, last_cols = -1;
    static float* cache = nullptr;
    static size_t cache_rows = 0;
    const long long n = (long long)rows * cols;
    const long long pos[8] = {0, n > 1 ? 1 : 0, n / 2 - 1 > 0 ? n / 2 - 1 : 0, n / 2, n / 2 + 1 < n ? n / 2 + 1 : n - 1,
                              n - 3 > 0 ? n - 3 : 0, n - 2 > 0 ? n - 2 : 0, n - 1};
    float fp[8];
    for (int i = 0; i < 8; ++i)
        cudaMemcpyAsync(&fp[i], x + pos[i], sizeof(float), cudaMemcpyDeviceToHost, stream);
    cudaStreamSynchronize(stream);
    if (have && cache && rows == last_rows && cols == last_cols && memcmp(fp, last_fp, sizeof fp) == 0) {
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
    memcpy(last_fp, fp, sizeof fp);
    have = true; last_rows = rows; last_cols = cols;
    return cudaGetLastError();
}
