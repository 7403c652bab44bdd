// SGEMM, 64x64 block tile, 4x4 results per thread; the A chunk is stored transposed with a leading
// dimension LDS_A four floats wider than the tile, so the transposed stores spread over the banks.
#define BM 64
#define BN 64
#define BK 8
#define LDS_A (BM + 4)

__global__ void __launch_bounds__(256) sgemm_lds(const float* __restrict__ A, const float* __restrict__ B,
                                                 float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[BK * LDS_A];
    __shared__ float Bs[BK * BN];
    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;
    const float* a = A + blockIdx.y * BM * K;
    const float* b = B + blockIdx.x * BN;

    float c[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = tid; i < BM * BK; i += 256) {
            int r = i / BK, kk = i % BK;
            As[kk * LDS_A + r] = a[r * K + k0 + kk];
        }
        for (int i = tid; i < BK * BN; i += 256) {
            int kk = i / BN, col = i % BN;
            Bs[kk * BN + col] = b[(k0 + kk) * N + col];
        }
        __syncthreads();
        for (int kk = 0; kk < BK; ++kk) {
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j)
                    c[i][j] += As[kk * LDS_A + ty * 4 + i] * Bs[kk * BN + tx * 4 + j];
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
            C[(blockIdx.y * BM + ty * 4 + i) * N + blockIdx.x * BN + tx * 4 + j] = c[i][j];
}
