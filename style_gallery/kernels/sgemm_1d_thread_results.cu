// SGEMM with 1-D blocktiling: a block computes a BM x BN tile of C from shared chunks of A and B,
// and each thread a column of TM results, reusing every B value it loads from shared memory TM times.
template <const int BM, const int BN, const int BK, const int TM>
__global__ void sgemm1DBlocktiling(int M, int N, int K, const float* A, const float* B, float* C) {
    const unsigned int cRow = blockIdx.y;
    const unsigned int cCol = blockIdx.x;
    const int threadCol = threadIdx.x % BN;
    const int threadRow = threadIdx.x / BN;

    __shared__ float As[BM * BK];
    __shared__ float Bs[BK * BN];

    A += cRow * BM * K;
    B += cCol * BN;
    C += cRow * BM * N + cCol * BN;

    const unsigned int innerColA = threadIdx.x % BK;
    const unsigned int innerRowA = threadIdx.x / BK;
    const unsigned int innerColB = threadIdx.x % BN;
    const unsigned int innerRowB = threadIdx.x / BN;

    float threadResults[TM] = {0.0f};
    for (unsigned int bkIdx = 0; bkIdx < K; bkIdx += BK) {
        As[innerRowA * BK + innerColA] = A[innerRowA * K + innerColA];
        Bs[innerRowB * BN + innerColB] = B[innerRowB * N + innerColB];
        __syncthreads();
        A += BK;
        B += BK * N;
        for (unsigned int dotIdx = 0; dotIdx < BK; ++dotIdx) {
            float tmpB = Bs[dotIdx * BN + threadCol];
            for (unsigned int resIdx = 0; resIdx < TM; ++resIdx) {
                threadResults[resIdx] += As[(threadRow * TM + resIdx) * BK + dotIdx] * tmpB;
            }
        }
        __syncthreads();
    }
    for (unsigned int resIdx = 0; resIdx < TM; ++resIdx) {
        C[(threadRow * TM + resIdx) * N + threadCol] = threadResults[resIdx];
    }
}

template __global__ void sgemm1DBlocktiling<64, 64, 8, 8>(int, int, int, const float*, const float*, float*);
