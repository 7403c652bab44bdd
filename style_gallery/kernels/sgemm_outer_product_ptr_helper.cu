// SGEMM with 2-D blocktiling: every thread keeps TM x TN results in a flat register array and, per k,
// hands its TM values of A and TN values of B to a helper that adds their outer product.
template <const int TM, const int TN>
__device__ __forceinline__ void outer_product(const float* regM, const float* regN, float* threadResults) {
    for (int i = 0; i < TM; ++i) {
        for (int j = 0; j < TN; ++j) {
            threadResults[i * TN + j] += regM[i] * regN[j];
        }
    }
}

template <const int BM, const int BN, const int BK, const int TM, const int TN>
__global__ void sgemm2D(int M, int N, int K, const float* A, const float* B, float* C) {
    const int threadCol = threadIdx.x % (BN / TN);
    const int threadRow = threadIdx.x / (BN / TN);
    __shared__ float As[BM * BK];
    __shared__ float Bs[BK * BN];

    A += blockIdx.y * BM * K;
    B += blockIdx.x * BN;
    C += blockIdx.y * BM * N + blockIdx.x * BN;

    constexpr int numThreads = (BM * BN) / (TM * TN);
    float threadResults[TM * TN] = {0.0f};
    float regM[TM];
    float regN[TN];

    for (int bkIdx = 0; bkIdx < K; bkIdx += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += numThreads) As[i] = A[(i / BK) * K + i % BK];
        for (int i = threadIdx.x; i < BK * BN; i += numThreads) Bs[i] = B[(i / BN) * N + i % BN];
        __syncthreads();
        A += BK;
        B += BK * N;
        for (int dotIdx = 0; dotIdx < BK; ++dotIdx) {
            for (int i = 0; i < TM; ++i) regM[i] = As[(threadRow * TM + i) * BK + dotIdx];
            for (int i = 0; i < TN; ++i) regN[i] = Bs[dotIdx * BN + threadCol * TN + i];
            outer_product<TM, TN>(regM, regN, threadResults);
        }
        __syncthreads();
    }
    for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j)
            C[(threadRow * TM + i) * N + threadCol * TN + j] = threadResults[i * TN + j];
}

template __global__ void sgemm2D<128, 128, 8, 8, 8>(int, int, int, const float*, const float*, float*);
