// Sum over dimension 1 of an fp32 [outer, reduce, inner] tensor -> [outer, inner]. One thread per
// output element, its flat index split into (outer, inner) coordinates; it walks the reduced dimension,
// whose elements lie `inner` apart.
#include <cuda_runtime.h>

#define BLOCK_SIZE 256

__global__ void sum_reduce_kernel(const float* x, float* out, int outer, int reduce, int inner) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= outer * inner) return;
    int o = idx / inner;
    int i = idx % inner;
    float acc = 0.0f;
    for (int r = 0; r < reduce; ++r) {
        acc += x[(o * reduce + r) * inner + i];
    }
    out[idx] = acc;
}

extern "C" cudaError_t sum_dim1(const float* x, float* out, int outer, int reduce, int inner, cudaStream_t stream) {
    int total = outer * inner;
    sum_reduce_kernel<<<(total + BLOCK_SIZE - 1) / BLOCK_SIZE, BLOCK_SIZE, 0, stream>>>(x, out, outer, reduce, inner);
    return cudaGetLastError();
}
