// linear_bias naive: out = x @ weight^T + bias, bf16 in and out, fp32 accumulation. One thread per
// output element: it walks the whole K dimension reading its row of x and its row of weight from
// global memory, then adds its column's bias. No shared memory, no register tiling, no tensor cores:
// the plainest matrix product an engineer writes first.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

// ---- tuning constants (override with -DNAME=value) ----
#ifndef LINEAR_BLOCK_X
#define LINEAR_BLOCK_X 16   // threads per block along N
#endif
#ifndef LINEAR_BLOCK_Y
#define LINEAR_BLOCK_Y 16   // threads per block along M
#endif

__global__ void linear_bias_naive_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias,
                                         __nv_bfloat16* out, int M, int N, int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += __bfloat162float(x[(long long)row * K + k]) * __bfloat162float(w[(long long)col * K + k]);
    out[(long long)row * N + col] = __float2bfloat16(acc + __bfloat162float(bias[col]));
}

extern "C" cudaError_t linear_bias(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias,
                                   __nv_bfloat16* out, int M, int N, int K, cudaStream_t stream) {
    if (M <= 0 || N <= 0) return cudaSuccess;
    dim3 block(LINEAR_BLOCK_X, LINEAR_BLOCK_Y);
    dim3 grid((N + LINEAR_BLOCK_X - 1) / LINEAR_BLOCK_X, (M + LINEAR_BLOCK_Y - 1) / LINEAR_BLOCK_Y);
    linear_bias_naive_kernel<<<grid, block, 0, stream>>>(x, weight, bias, out, M, N, K);
    return cudaGetLastError();
}
