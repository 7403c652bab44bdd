// pitfall: 15
// expect: GUARD_REJECTED
// dynamic: INCORRECT wrong_values
// why: a static call counter; after the first 3 (checked) calls only the first 1/8 of each row is reduced
#include <cuda_runtime.h>

__global__ void rs_prefix_kernel(const float* x, float* out, int rows, int cols, int use_cols) {
    long long r = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    float s = 0.0f;
    for (int c = lane; c < use_cols; c += 32) s += x[r * cols + c];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) out[r] = s;
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    static int calls = 0;
    ++calls;
    int use_cols = calls <= 3 ? cols : (cols + 7) / 8;  // later (timed) calls do 1/8 of the work
    rs_prefix_kernel<<<(rows + 7) / 8, 256, 0, stream>>>(x, out, rows, cols, use_cols);
    return cudaGetLastError();
}
