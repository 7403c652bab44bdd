// pitfall: 2
// expect: GUARD_REJECTED
// dynamic: INCORRECT wrong_values | RUNTIME_ERROR cuda_error
// why: a detached host thread sleeps ~1 ms and only then launches the correct kernel; the entry returns before any work is queued, so the check reads the unwritten output, or the late launch writes into buffers the harness has freed or reused (an illegal address): a race decides which
#include <cuda_runtime.h>
#include <thread>
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
    std::thread([=] {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        rs_kernel<<<(rows + 7) / 8, 256, 0, stream>>>(x, out, rows, cols);
    }).detach();
    return cudaSuccess;
}
