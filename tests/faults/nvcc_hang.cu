// fault: nvcc_hang
// expect: COMPILE_ERROR
// why: a constexpr fan-out of 2^24 template instantiations, each folding a 600000-step loop at compile time; cudafe++ computes for weeks at flat memory, so only the gate's nvcc time limit (a SIGKILL of nvcc's whole session) ends it
#include <cuda_runtime.h>

constexpr unsigned long long churn(unsigned long long steps, unsigned long long s) {
    for (unsigned long long i = 0; i < steps; ++i) s = s * 6364136223846793005ull + i;
    return s;
}

// Every instantiation has distinct arguments, so nothing is shared: 2^24 leaves, ~1 s each.
template <int N, unsigned long long M>
struct Fan {
    static constexpr unsigned long long v = Fan<N - 1, 2 * M>::v ^ Fan<N - 1, 2 * M + 1>::v;
};

template <unsigned long long M>
struct Fan<0, M> {
    static constexpr unsigned long long v = churn(600000, M);
};

constexpr unsigned long long kSalt = Fan<24, 1>::v;

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
