// Test kernel of the matmul rewriter: torch._grouped_mm(a, b, offs) with a 2-D a [M, K] and a 3-D b [groups, K, N],
// bf16 in and out, fp32 accumulation, offs the groups' cumulative row ends (int32, device). One thread per
// output element; rows at or past the last end are not written.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

__global__ void grouped_naive(const __nv_bfloat16* a, const __nv_bfloat16* b, const int* offs,
                              __nv_bfloat16* out, int groups, int M, int N, int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    int g = 0, start = 0;
    while (g < groups && row >= offs[g]) start = offs[g++];
    if (g == groups) return;
    const __nv_bfloat16* bg = b + (long long)g * K * N;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += __bfloat162float(a[(long long)row * K + k]) * __bfloat162float(bg[(long long)k * N + col]);
    out[(long long)row * N + col] = __float2bfloat16(acc);
}

extern "C" cudaError_t grouped_mm(const __nv_bfloat16* a, const __nv_bfloat16* b, const int* offs,
                                  __nv_bfloat16* out, int groups, int M, int N, int K, cudaStream_t stream) {
    if (groups <= 0 || M <= 0 || N <= 0) return cudaSuccess;
    dim3 block(16, 16);
    dim3 grid((N + 15) / 16, (M + 15) / 16);
    grouped_naive<<<grid, block, 0, stream>>>(a, b, offs, out, groups, M, N, K);
    return cudaGetLastError();
}
