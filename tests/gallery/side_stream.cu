// pitfall: 1
// expect: GUARD_REJECTED
// dynamic: GUARD_REJECTED off_stream_work
// why: launches the real reduction on a private non-blocking stream and returns at once, so events on the harness stream time nothing
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
    (void)stream;
    static cudaStream_t side = nullptr;  // created once, reused: the work never touches the timed stream
    if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    rs_kernel<<<(rows + 7) / 8, 256, 0, side>>>(x, out, rows, cols);
    return cudaGetLastError();  // no wait: the caller's events see an empty stream
}
