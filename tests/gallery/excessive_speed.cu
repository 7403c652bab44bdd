// pitfall: 16
// expect: INCORRECT
// dynamic: INCORRECT wrong_values
// why: reads only every 16th float4 of each row and scales by 16, an "approximate" sum faster than the bytes allow
#include <cuda_runtime.h>

__global__ void rs_sampled_kernel(const float* x, float* out, int rows, int cols) {
    long long r = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const float* row = x + r * cols;
    float s = 0.0f;
    // sample float4 groups 0, 16, 32, ... (elements 64*k .. 64*k+3), scalar loads so any alignment works
    for (long long g = (long long)lane * 16; g * 4 < cols; g += 32 * 16)
        for (int j = 0; j < 4 && g * 4 + j < cols; ++j) s += row[g * 4 + j];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) out[r] = s * 16.0f;
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    rs_sampled_kernel<<<(rows + 7) / 8, 256, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
