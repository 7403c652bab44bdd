// Square sgemm over a 1-D grid: thread idx computes c[idx], element (idx / size, idx % size) of the
// size x size product of a and b (fp32, row-major).
#include <cuda_runtime.h>

#define THREADS 256

__global__ void sgemm_flat(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                           int size) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= size * size) return;
    const int i = idx / size;
    const int j = idx % size;
    float acc = 0.f;
    for (int k = 0; k < size; k++)
        acc = fmaf(a[i * size + k], b[k * size + j], acc);
    c[idx] = acc;
}

extern "C" cudaError_t sgemm(const float* a, const float* b, float* c, int size, cudaStream_t stream) {
    const int total = size * size;
    sgemm_flat<<<(total + THREADS - 1) / THREADS, THREADS, 0, stream>>>(a, b, c, size);
    return cudaGetLastError();
}
