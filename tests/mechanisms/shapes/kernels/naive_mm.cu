// Test kernel of the matmul rewriter: torch.mm / addmm / bmm with the held-out GEMM instances' entry points,
// bf16 in and out, fp32 accumulation, a [M, K] and b [K, N] row-major. One thread per output element.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

__global__ void mm_naive(const __nv_bfloat16* a, const __nv_bfloat16* b, const __nv_bfloat16* bias,
                         __nv_bfloat16* out, int M, int N, int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const long long z = blockIdx.z;
    if (row >= M || col >= N) return;
    const __nv_bfloat16* az = a + z * M * K;
    const __nv_bfloat16* bz = b + z * K * N;
    float acc = bias != nullptr ? __bfloat162float(bias[col]) : 0.0f;
    for (int k = 0; k < K; ++k)
        acc += __bfloat162float(az[(long long)row * K + k]) * __bfloat162float(bz[(long long)k * N + col]);
    out[z * M * N + (long long)row * N + col] = __float2bfloat16(acc);
}

static cudaError_t launch(const __nv_bfloat16* a, const __nv_bfloat16* b, const __nv_bfloat16* bias,
                          __nv_bfloat16* out, int batch, int M, int N, int K, cudaStream_t stream) {
    if (batch <= 0 || M <= 0 || N <= 0) return cudaSuccess;
    dim3 block(16, 16);
    dim3 grid((N + 15) / 16, (M + 15) / 16, batch);
    mm_naive<<<grid, block, 0, stream>>>(a, b, bias, out, M, N, K);
    return cudaGetLastError();
}

extern "C" cudaError_t mm(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* out, int M, int N, int K,
                          cudaStream_t stream) {
    return launch(a, b, nullptr, out, 1, M, N, K, stream);
}

extern "C" cudaError_t addmm(const __nv_bfloat16* bias, const __nv_bfloat16* a, const __nv_bfloat16* b,
                             __nv_bfloat16* out, int M, int N, int K, cudaStream_t stream) {
    return launch(a, b, bias, out, 1, M, N, K, stream);
}

extern "C" cudaError_t bmm(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* out, int batch, int M,
                           int N, int K, cudaStream_t stream) {
    return launch(a, b, nullptr, out, batch, M, N, K, stream);
}
