// SGEMM with a double buffer carved out of dynamic shared memory: stage s of A and B starts at
// s * STAGE_FLOATS, the stage index flips every chunk, and the next chunk is stored into the other
// stage before the current one is consumed.
#define BM 64
#define BN 64
#define BK 8
#define STAGE_FLOATS (BM * BK + BK * BN)

__global__ void sgemm_db_dyn(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                             int M, int N, int K) {
    extern __shared__ float smem[];
    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;
    const float* a = A + blockIdx.y * BM * K;
    const float* b = B + blockIdx.x * BN;

    int stage = 0;
    for (int i = tid; i < BM * BK; i += 256) smem[i] = a[(i / BK) * K + i % BK];
    for (int i = tid; i < BK * BN; i += 256) smem[BM * BK + i] = b[(i / BN) * N + i % BN];
    __syncthreads();

    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        float* As = smem + stage * STAGE_FLOATS;
        float* Bs = As + BM * BK;
        if (k0 + BK < K) {
            float* An = smem + (stage ^ 1) * STAGE_FLOATS;
            float* Bn = An + BM * BK;
            for (int i = tid; i < BM * BK; i += 256) An[i] = a[(i / BK) * K + k0 + BK + i % BK];
            for (int i = tid; i < BK * BN; i += 256) Bn[i] = b[(k0 + BK + i / BN) * N + i % BN];
        }
        for (int kk = 0; kk < BK; ++kk)
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) acc[i][j] += As[(ty * 4 + i) * BK + kk] * Bs[kk * BN + tx * 4 + j];
        __syncthreads();
        stage ^= 1;
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) C[(blockIdx.y * BM + ty * 4 + i) * N + blockIdx.x * BN + tx * 4 + j] = acc[i][j];
}
