// fault: nvcc_blowup
// expect: COMPILE_ERROR
// why: 2^40 distinct template instantiations; cudafe++ grows by ~100 MB a second without end, so the gate's address-space cap on every compiler process (or, without one, its time limit) ends it before it takes the machine's memory
#include <cuda_runtime.h>

template <int N, unsigned long long M>
struct Fan {
    static constexpr unsigned long long v = Fan<N - 1, 2 * M>::v ^ Fan<N - 1, 2 * M + 1>::v;
};

template <unsigned long long M>
struct Fan<0, M> {
    static constexpr unsigned long long v = M * 0x9E3779B97F4A7C15ull;
};

constexpr unsigned long long kSalt = Fan<40, 1>::v;

__global__ void rs_kernel(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += x[(long long)r * cols + c];
    out[r] = s + (float)(kSalt & 0);
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    rs_kernel<<<(rows + 255) / 256, 256, 0, stream>>>(x, out, rows, cols);
    return cudaGetLastError();
}
