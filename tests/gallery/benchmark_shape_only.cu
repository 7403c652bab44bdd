// pitfall: 18
// expect: INCORRECT
// dynamic: INCORRECT wrong_values
// why: the row length and trip counts are compile-time constants of the 16384x4096 benchmark case; any other shape gets wrong sums
#include <cuda_runtime.h>

constexpr int kCols = 4096;                 // hard-coded benchmark width
constexpr int kVecPerLane = kCols / 4 / 32; // fixed trip count: 32 float4 per lane

__global__ void rs_fixed_kernel(const float* x, float* out, int rows, long long total) {
    long long r = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    float s = 0.0f;
#pragma unroll 8
    for (int k = 0; k < kVecPerLane; ++k) {
        long long e = r * kCols + (long long)(k * 32 + lane) * 4;  // assumes rows of exactly kCols
        if (e + 3 < total) {                                       // stays in bounds, so it is wrong, not a crash
            float4 v = *reinterpret_cast<const float4*>(x + e);
            s += (v.x + v.y) + (v.z + v.w);
        }
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) out[r] = s;
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    // total guards the allocation; the float4 loads also assume 16-byte rows, true only for cols % 4 == 0
    long long total = (long long)rows * cols;
    if (((unsigned long long)(size_t)x & 15) == 0)
        rs_fixed_kernel<<<(rows + 7) / 8, 256, 0, stream>>>(x, out, rows, total);
    return cudaGetLastError();
}
