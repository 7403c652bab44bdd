// SGEMM with 2x2 outputs per thread: A and B tiles staged through registers into shared arrays
// whose rows are padded by a PAD macro, accumulators in a 2x2 register array.
#define BS 32
#define PAD 1

__global__ void sgemm_pad(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int n)
{
    __shared__ float sA[BS][BS + PAD];
    __shared__ float sB[BS][BS + PAD];
    const int tx = threadIdx.x, ty = threadIdx.y;          // 16 x 16 threads
    const int row = blockIdx.y * BS + ty * 2, col = blockIdx.x * BS + tx * 2;
    float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};

    for (int k0 = 0; k0 < n; k0 += BS) {
        for (int r = ty; r < BS; r += 16)
            for (int c = tx; c < BS; c += 16) {
                sA[r][c] = A[(blockIdx.y * BS + r) * n + k0 + c];
                sB[r][c] = B[(k0 + r) * n + blockIdx.x * BS + c];
            }
        __syncthreads();
        for (int k = 0; k < BS; ++k)
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j)
                    acc[i][j] += sA[ty * 2 + i][k] * sB[k][tx * 2 + j];
        __syncthreads();
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
            C[(row + i) * n + col + j] = acc[i][j];
}
