// klineage-step: mechanism=restrict
// logits, labels and loss are marked __restrict__: the compiler may assume the store to loss never
// aliases the inputs, so it may keep row loads in registers, reorder them and use the read-only path.
#include <cuda_runtime.h>
#include <float.h>

__global__ void cross_entropy_naive_kernel(const float* __restrict__ logits,
                                           const long long* __restrict__ labels,
                                           float* __restrict__ loss, int batch, int vocab) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= batch) return;
    const float* row = logits + (long long)b * vocab;
    float row_max = -FLT_MAX;
    for (int c = 0; c < vocab; ++c) row_max = fmaxf(row_max, row[c]);
    float sum = 0.0f;
    for (int c = 0; c < vocab; ++c) sum += expf(row[c] - row_max);
    const long long label = labels[b];
    const float target = (label >= 0 && label < vocab) ? row[label] : __int_as_float(0x7fc00000);
    loss[b] = row_max + logf(sum) - target;
}

extern "C" cudaError_t cross_entropy(const float* logits, const long long* labels, float* loss, int batch, int vocab, cudaStream_t stream) {
    if (batch <= 0) return cudaSuccess;
    int block = 256;
    int grid = (batch + block - 1) / block;
    cross_entropy_naive_kernel<<<grid, block, 0, stream>>>(logits, labels, loss, batch, vocab);
    return cudaGetLastError();
}
