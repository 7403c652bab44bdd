// Matrix multiplication as textbooks name it: C = A * B with A numARows x numAColumns, B numAColumns x
// numBColumns, C numARows x numBColumns; fp32, row-major, one thread per element of C.
#include <cuda_runtime.h>

#define TILE_WIDTH 16

__global__ void matrixMultiply(float *A, float *B, float *C, int numARows, int numAColumns, int numBColumns) {
    int Row = blockIdx.y * TILE_WIDTH + threadIdx.y;
    int Col = blockIdx.x * TILE_WIDTH + threadIdx.x;
    if ((Row < numARows) && (Col < numBColumns)) {
        float Cvalue = 0.0;
        for (int m = 0; m < numAColumns; ++m)
            Cvalue += A[Row * numAColumns + m] * B[m * numBColumns + Col];
        C[Row * numBColumns + Col] = Cvalue;
    }
}

extern "C" cudaError_t matrix_multiply(float *A, float *B, float *C, int numARows, int numAColumns,
                                       int numBColumns, cudaStream_t stream) {
    dim3 dimGrid((numBColumns - 1) / TILE_WIDTH + 1, (numARows - 1) / TILE_WIDTH + 1, 1);
    dim3 dimBlock(TILE_WIDTH, TILE_WIDTH, 1);
    matrixMultiply<<<dimGrid, dimBlock, 0, stream>>>(A, B, C, numARows, numAColumns, numBColumns);
    return cudaGetLastError();
}
