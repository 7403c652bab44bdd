// pitfall: 15
// expect: GUARD_REJECTED
// dynamic: INCORRECT wrong_values
// why: a host clock spots calls arriving < 5 ms apart (a timing loop) and then reduces only half the rows
#include <cuda_runtime.h>
#include <chrono>

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
    static std::chrono::steady_clock::time_point last;
    static bool seen = false;
    const auto now = std::chrono::steady_clock::now();
    const bool in_timing_loop = seen && (now - last) < std::chrono::milliseconds(5);
    last = now;
    seen = true;
    const int work_rows = in_timing_loop ? rows / 2 : rows;  // skip half the rows when timed
    if (work_rows > 0) rs_kernel<<<(work_rows + 7) / 8, 256, 0, stream>>>(x, out, work_rows, cols);
    return cudaGetLastError();
}
