// SGEMM with register-staged double buffering: one shared array per operand holds two tiles
// ([2 * BK * BM]); while the block computes from tile (k & 1), the next tile's float4 loads are
// held in registers and written to the other half. Each thread accumulates an 8x8 tile.
#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8

__global__ void __launch_bounds__(256) sgemm_db(int M, int N, int K, const float* __restrict__ A,
                                                const float* __restrict__ B, float* __restrict__ C)
{
    __shared__ float As[2 * BK * BM];
    __shared__ float Bs[2 * BK * BN];

    const int tid = threadIdx.x;
    const int a_row = tid / 2, a_col = (tid % 2) * 4;      // A tile: 128 x 8, one float4 per thread
    const int b_row = tid / 32, b_col = (tid % 32) * 4;    // B tile: 8 x 128
    const float* Ablk = A + blockIdx.y * BM * K;
    const float* Bblk = B + blockIdx.x * BN;

    float acc[TM * TN];
    for (int i = 0; i < TM * TN; ++i) acc[i] = 0.f;

    float4 ra = *reinterpret_cast<const float4*>(&Ablk[a_row * K + a_col]);
    float4 rb = *reinterpret_cast<const float4*>(&Bblk[b_row * N + b_col]);
    As[(a_col + 0) * BM + a_row] = ra.x; As[(a_col + 1) * BM + a_row] = ra.y;
    As[(a_col + 2) * BM + a_row] = ra.z; As[(a_col + 3) * BM + a_row] = ra.w;
    *reinterpret_cast<float4*>(&Bs[b_row * BN + b_col]) = rb;
    __syncthreads();

    const int ty = tid / 16, tx = tid % 16;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const int cur = (k0 / BK) & 1, nxt = cur ^ 1;
        const bool more = k0 + BK < K;
        if (more) {
            ra = *reinterpret_cast<const float4*>(&Ablk[a_row * K + k0 + BK + a_col]);
            rb = *reinterpret_cast<const float4*>(&Bblk[(k0 + BK + b_row) * N + b_col]);
        }
        for (int kk = 0; kk < BK; ++kk) {
            float a[TM], b[TN];
            for (int i = 0; i < TM; ++i) a[i] = As[cur * BK * BM + kk * BM + ty * TM + i];
            for (int j = 0; j < TN; ++j) b[j] = Bs[cur * BK * BN + kk * BN + tx * TN + j];
            for (int i = 0; i < TM; ++i)
                for (int j = 0; j < TN; ++j)
                    acc[i * TN + j] += a[i] * b[j];
        }
        if (more) {
            float* as = &As[nxt * BK * BM];
            as[(a_col + 0) * BM + a_row] = ra.x; as[(a_col + 1) * BM + a_row] = ra.y;
            as[(a_col + 2) * BM + a_row] = ra.z; as[(a_col + 3) * BM + a_row] = ra.w;
            *reinterpret_cast<float4*>(&Bs[nxt * BK * BN + b_row * BN + b_col]) = rb;
        }
        __syncthreads();
    }
    float* Cblk = C + (blockIdx.y * BM + ty * TM) * N + blockIdx.x * BN + tx * TN;
    for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; j += 4)
            *reinterpret_cast<float4*>(&Cblk[i * N + j]) =
                make_float4(acc[i * TN + j], acc[i * TN + j + 1], acc[i * TN + j + 2], acc[i * TN + j + 3]);
}
