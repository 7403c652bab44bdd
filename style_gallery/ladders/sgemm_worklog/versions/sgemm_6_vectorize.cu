#include <cuda_runtime.h>

#define CEIL_DIV(M, N) (((M) + (N) - 1) / (N))

// Kernel 6: vectorized memory access. Global loads of A and B and the stores of C move a float4 at a
// time; the A chunk is stored transposed (BK x BM), so a thread reads its TM values of A from
// shared memory as float4s too.
template <const int TM, const int TN>
__device__ __forceinline__ void outer_product(const float* regM, const float* regN, float* threadResults) {
    for (int resIdxM = 0; resIdxM < TM; ++resIdxM) {
        for (int resIdxN = 0; resIdxN < TN; ++resIdxN) {
            threadResults[resIdxM * TN + resIdxN] += regM[resIdxM] * regN[resIdxN];
        }
    }
}

template <const int BM, const int BN, const int BK, const int TM, const int TN>
__global__ void sgemmVectorize(int M, int N, int K, const float* A, const float* B, float* C) {
    const unsigned int cRow = blockIdx.y;
    const unsigned int cCol = blockIdx.x;

    const int threadCol = threadIdx.x % (BN / TN);
    const int threadRow = threadIdx.x / (BN / TN);

    __shared__ float As[BM * BK];
    __shared__ float Bs[BK * BN];

    A += cRow * BM * K;
    B += cCol * BN;
    C += cRow * BM * N + cCol * BN;

    // one float4 of A and one of B per thread and chunk: (BM * BK) / 4 == (BK * BN) / 4 == threads
    const unsigned int innerRowA = threadIdx.x / (BK / 4);
    const unsigned int innerColA = threadIdx.x % (BK / 4);
    const unsigned int innerRowB = threadIdx.x / (BN / 4);
    const unsigned int innerColB = threadIdx.x % (BN / 4);

    float threadResults[TM * TN] = {0.0f};
    float regM[TM] = {0.0f};
    float regN[TN] = {0.0f};

    for (int bkIdx = 0; bkIdx < K; bkIdx += BK) {
        float4 tmp = reinterpret_cast<const float4*>(&A[innerRowA * K + innerColA * 4])[0];
        As[(innerColA * 4 + 0) * BM + innerRowA] = tmp.x;
        As[(innerColA * 4 + 1) * BM + innerRowA] = tmp.y;
        As[(innerColA * 4 + 2) * BM + innerRowA] = tmp.z;
        As[(innerColA * 4 + 3) * BM + innerRowA] = tmp.w;

        reinterpret_cast<float4*>(&Bs[innerRowB * BN + innerColB * 4])[0] =
            reinterpret_cast<const float4*>(&B[innerRowB * N + innerColB * 4])[0];
        __syncthreads();
        A += BK;
        B += BK * N;

        for (unsigned int dotIdx = 0; dotIdx < BK; ++dotIdx) {
            for (unsigned int i = 0; i < TM; i += 4) {
                float4 a4 = reinterpret_cast<const float4*>(&As[dotIdx * BM + threadRow * TM + i])[0];
                regM[i + 0] = a4.x;
                regM[i + 1] = a4.y;
                regM[i + 2] = a4.z;
                regM[i + 3] = a4.w;
            }
            for (unsigned int i = 0; i < TN; i += 4) {
                float4 b4 = reinterpret_cast<const float4*>(&Bs[dotIdx * BN + threadCol * TN + i])[0];
                regN[i + 0] = b4.x;
                regN[i + 1] = b4.y;
                regN[i + 2] = b4.z;
                regN[i + 3] = b4.w;
            }
            outer_product<TM, TN>(regM, regN, threadResults);
        }
        __syncthreads();
    }

    for (unsigned int resIdxM = 0; resIdxM < TM; ++resIdxM) {
        for (unsigned int resIdxN = 0; resIdxN < TN; resIdxN += 4) {
            float4 out;
            out.x = threadResults[resIdxM * TN + resIdxN + 0];
            out.y = threadResults[resIdxM * TN + resIdxN + 1];
            out.z = threadResults[resIdxM * TN + resIdxN + 2];
            out.w = threadResults[resIdxM * TN + resIdxN + 3];
            reinterpret_cast<float4*>(&C[(threadRow * TM + resIdxM) * N + threadCol * TN + resIdxN])[0] = out;
        }
    }
}

extern "C" cudaError_t sgemm(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream) {
    const int BM = 64, BN = 64, BK = 16, TM = 4, TN = 4;
    dim3 gridDim(CEIL_DIV(N, BN), CEIL_DIV(M, BM));
    dim3 blockDim((BM * BN) / (TM * TN));
    sgemmVectorize<BM, BN, BK, TM, TN><<<gridDim, blockDim, 0, stream>>>(M, N, K, A, B, C);
    return cudaGetLastError();
}
