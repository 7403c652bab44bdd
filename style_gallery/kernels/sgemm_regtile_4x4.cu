// SGEMM where each thread owns a 4x4 block of C: operands come straight from global memory (L1/L2
// does the reuse), the accumulators live in float c[4][4] updated with fmaf inside fully unrolled
// loops.
__global__ void sgemm_4x4(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                          int M, int N, int K)
{
    const int row0 = (blockIdx.y * blockDim.y + threadIdx.y) * 4;
    const int col0 = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (row0 >= M || col0 >= N) return;

    float c[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) c[i][j] = 0.0f;

    for (int k = 0; k < K; k++) {
        float a[4], b[4];
#pragma unroll
        for (int i = 0; i < 4; i++) a[i] = A[(row0 + i) * K + k];
#pragma unroll
        for (int j = 0; j < 4; j++) b[j] = B[k * N + col0 + j];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) c[i][j] = fmaf(a[i], b[j], c[i][j]);
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) C[(row0 + i) * N + col0 + j] = c[i][j];
}
