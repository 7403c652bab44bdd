// SGEMM with 1-D shared tiles: A is stored transposed into a padded [BK * (BM + 4)] array, B into
// [BK * BN]; each thread computes a TM x TN tile in registers through a helper that applies one
// outer product. Tile sizes are template parameters without defaults.
template <int TM, int TN>
__device__ __forceinline__ void outer_product(float (&acc)[TM][TN], const float (&a)[TM], const float (&b)[TN])
{
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
            acc[i][j] += a[i] * b[j];
}

template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
sgemm_regtile(int M, int N, int K, const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C)
{
    __shared__ float As[BK * (BM + 4)];
    __shared__ float Bs[BK * BN];

    const int threads = (BM / TM) * (BN / TN);
    const int trow = threadIdx.x / (BN / TN), tcol = threadIdx.x % (BN / TN);
    A += blockIdx.y * BM * K;
    B += blockIdx.x * BN;
    C += blockIdx.y * BM * N + blockIdx.x * BN;

    float acc[TM][TN] = {};
    float a[TM], b[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += threads) {
            int r = i / BK, c = i % BK;
            As[c * (BM + 4) + r] = A[r * K + c];
        }
        for (int i = threadIdx.x; i < BK * BN; i += threads) {
            int r = i / BN, c = i % BN;
            Bs[r * BN + c] = B[r * N + c];
        }
        __syncthreads();
        A += BK;
        B += BK * N;
        for (int kk = 0; kk < BK; ++kk) {
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[kk * (BM + 4) + trow * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[kk * BN + tcol * TN + j];
            outer_product<TM, TN>(acc, a, b);
        }
        __syncthreads();
    }
    for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j)
            C[(trow * TM + i) * N + tcol * TN + j] = acc[i][j];
}

void sgemm(int M, int N, int K, const float* A, const float* B, float* C, cudaStream_t s)
{
    dim3 grid(N / 64, M / 64);
    sgemm_regtile<64, 64, 8, 8, 8><<<grid, 64, 0, s>>>(M, N, K, A, B, C);
}
