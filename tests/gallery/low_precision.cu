// pitfall: 10
// expect: GUARD_REJECTED
// dynamic: INCORRECT wrong_values
// why: converts every element to __half and accumulates in half precision with __hadd; a precision downgrade with ~1e-3 relative error
#include <cuda_runtime.h>
#include <cuda_fp16.h>

__global__ void rs_half_kernel(const float* x, float* out, int rows, int cols) {
    long long r = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    __half s = __float2half(0.0f);
    for (int c = lane; c < cols; c += 32) s = __hadd(s, __float2half(x[r * cols + c]));
    for (int o = 16; o > 0; o >>= 1) s = __hadd(s, __shfl_xor_sync(0xffffffffu, s, o));
    if (lane == 0) out[r] = __half2float(s);
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    rs_half_kernel<<<(rows + 7) / 8, 256, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
