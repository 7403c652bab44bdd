// GEMM tile kernel whose per-thread 4x4 accumulators live in a struct; a rank-1 update helper
// takes the struct by reference with the thread's column of A and row of B.
struct Accum {
    float c[4][4];
};

__device__ __forceinline__ void rank1_update(Accum& acc, const float (&a)[4], const float (&b)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc.c[i][j] = fmaf(a[i], b[j], acc.c[i][j]);
}

__global__ void gemm_tile_16x16(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                int M, int N, int K) {
    __shared__ float sA[16][64];
    __shared__ float sB[16][64];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int row0 = blockIdx.y * 64, col0 = blockIdx.x * 64;

    Accum acc = {};
    for (int k0 = 0; k0 < K; k0 += 16) {
        for (int i = threadIdx.x; i < 16 * 64; i += 256) {
            int kk = i / 64, mm = i % 64;
            sA[kk][mm] = A[(row0 + mm) * K + k0 + kk];
            sB[kk][mm] = B[(k0 + kk) * N + col0 + mm];
        }
        __syncthreads();
        for (int kk = 0; kk < 16; ++kk) {
            float a[4], b[4];
            for (int i = 0; i < 4; ++i) a[i] = sA[kk][ty * 4 + i];
            for (int j = 0; j < 4; ++j) b[j] = sB[kk][tx * 4 + j];
            rank1_update(acc, a, b);
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) C[(row0 + ty * 4 + i) * N + col0 + tx * 4 + j] = acc.c[i][j];
}
