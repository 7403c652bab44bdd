// Softmax over the last dimension of an fp32 [batch, seq, dim] tensor. A 2-D grid: blockIdx.y is the
// batch, one thread per sequence position; a 64-bit row offset, the fast __expf.
#include <cuda_runtime.h>
#include <cfloat>

__global__ void softmax_lastdim_kernel(const float* __restrict__ x, float* __restrict__ y, int seq, int dim) {
    const int b = blockIdx.y;
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= seq) return;
    const long long base = ((long long)b * seq + s) * dim;
    float m = -FLT_MAX;
    for (int d = 0; d < dim; ++d) m = fmaxf(m, x[base + d]);
    float z = 0.f;
    for (int d = 0; d < dim; ++d) z += __expf(x[base + d] - m);
    const float inv = 1.f / z;
    for (int d = 0; d < dim; ++d) y[base + d] = __expf(x[base + d] - m) * inv;
}

extern "C" cudaError_t softmax_3d(const float* x, float* y, int batch, int seq, int dim, cudaStream_t stream) {
    if (batch <= 0 || seq <= 0) return cudaSuccess;
    dim3 grid((seq + 127) / 128, batch);
    dim3 block(128);
    softmax_lastdim_kernel<<<grid, block, 0, stream>>>(x, y, seq, dim);
    return cudaGetLastError();
}
