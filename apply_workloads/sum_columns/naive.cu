// Column sums of an fp32 [n_rows, n_cols] matrix (a sum over dimension 0) -> [n_cols], with size_t
// extents and a double accumulator. One thread per column, walking down it n_cols elements at a step.
#include <cuda_runtime.h>
#include <cstddef>

#ifndef COLSUM_THREADS
#define COLSUM_THREADS 128
#endif

__global__ void colsum(const float* __restrict__ a, float* __restrict__ s, size_t n_rows, size_t n_cols) {
    const size_t col = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (col < n_cols) {
        double total = 0.0;
        for (size_t r = 0; r < n_rows; ++r)
            total += a[r * n_cols + col];
        s[col] = (float)total;
    }
}

extern "C" cudaError_t column_sums(const float* a, float* s, long long n_rows, long long n_cols, cudaStream_t stream) {
    if (n_rows <= 0 || n_cols <= 0) return cudaSuccess;
    dim3 block(COLSUM_THREADS);
    dim3 grid((unsigned)((n_cols + COLSUM_THREADS - 1) / COLSUM_THREADS));
    colsum<<<grid, block, 0, stream>>>(a, s, (size_t)n_rows, (size_t)n_cols);
    return cudaGetLastError();
}
