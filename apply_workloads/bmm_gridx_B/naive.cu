// Batched product out[i] = lhs[i] @ rhs[i], i < B (lhs: B x M x K, rhs: B x K x N, out: B x M x N, fp32).
// The problem is blockIdx.x; columns run along blockIdx.y, rows along blockIdx.z.
#include <cuda_runtime.h>

#define BX 32
#define BY 8

__global__ void bmm_kernel(const float* lhs, const float* rhs, float* out, int B, int M, int N, int K) {
    int batch = blockIdx.x;
    int col = threadIdx.x + blockIdx.y * BX;
    int row = threadIdx.y + blockIdx.z * BY;
    if (batch < B && row < M && col < N) {
        const float* l = lhs + (long long)batch * M * K;
        const float* r = rhs + (long long)batch * K * N;
        float total = 0;
        for (int t = 0; t < K; ++t) {
            total += l[row * K + t] * r[t * N + col];
        }
        out[((long long)batch * M + row) * N + col] = total;
    }
}

extern "C" cudaError_t bmm_forward(const float* lhs, const float* rhs, float* out, int B, int M, int N, int K,
                                   cudaStream_t stream) {
    dim3 grid(B, (N + BX - 1) / BX, (M + BY - 1) / BY);
    bmm_kernel<<<grid, dim3(BX, BY), 0, stream>>>(lhs, rhs, out, B, M, N, K);
    return cudaGetLastError();
}
