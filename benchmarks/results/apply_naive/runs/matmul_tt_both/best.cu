// C = A^T * B^T with A stored Nk x Ni and B stored Nj x Nk (C is Ni x Nj), fp32, row-major. i runs along
// x, j along y.
#include <cuda_runtime.h>

__global__ void atbt(const float *A, const float *B, float *C, int Ni, int Nj, int Nk) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    if ((i < Ni) && (j < Nj)) {
        float sum = 0;
        for (int k = 0; k < Nk; ++k)
            sum += A[k * Ni + i] * B[j * Nk + k];
        C[i * Nj + j] = sum;
    }
}

extern "C" cudaError_t atbt_product(const float *A, const float *B, float *C, int Ni, int Nj, int Nk,
                                    cudaStream_t stream) {
    dim3 block(16, 16);
    dim3 grid((Ni + block.x - 1) / block.x, (Nj + block.y - 1) / block.y);
    atbt<<<grid, block, 0, stream>>>(A, B, C, Ni, Nj, Nk);
    return cudaGetLastError();
}
