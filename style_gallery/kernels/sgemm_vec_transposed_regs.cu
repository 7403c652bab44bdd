// SGEMM, 64x64 block tile, 4x4 outputs per thread kept in a flat out_frag[ROWS_T * COLS_T] array:
// A and B tiles are fetched as float4, A is written into shared memory transposed so that the
// k-loop reads a column of A and a row of B as contiguous runs, cached in a_col / b_row.
template <int TILE_M, int TILE_N, int TILE_K, int ROWS_T, int COLS_T>
__global__ void __launch_bounds__((TILE_M / ROWS_T) * (TILE_N / COLS_T))
gemm_vec4(const float* a_mat, const float* b_mat, float* c_mat, int m, int n, int k)
{
    __shared__ float a_t[TILE_K * TILE_M];   // [k][m]
    __shared__ float b_s[TILE_K * TILE_N];   // [k][n]
    const int nthreads = (TILE_M / ROWS_T) * (TILE_N / COLS_T);
    const int my_row = threadIdx.x / (TILE_N / COLS_T);
    const int my_col = threadIdx.x % (TILE_N / COLS_T);
    const float* a_blk = a_mat + (size_t)blockIdx.y * TILE_M * k;
    const float* b_blk = b_mat + (size_t)blockIdx.x * TILE_N;

    float out_frag[ROWS_T * COLS_T] = {};
    float a_col[ROWS_T], b_row[COLS_T];
    for (int kb = 0; kb < k; kb += TILE_K) {
        for (int v = threadIdx.x; v < TILE_M * TILE_K / 4; v += nthreads) {
            const int r = v / (TILE_K / 4), q = (v % (TILE_K / 4)) * 4;
            const float4 quad = *reinterpret_cast<const float4*>(a_blk + (size_t)r * k + kb + q);
            a_t[(q + 0) * TILE_M + r] = quad.x;
            a_t[(q + 1) * TILE_M + r] = quad.y;
            a_t[(q + 2) * TILE_M + r] = quad.z;
            a_t[(q + 3) * TILE_M + r] = quad.w;
        }
        for (int v = threadIdx.x; v < TILE_K * TILE_N / 4; v += nthreads) {
            const int r = v / (TILE_N / 4), q = (v % (TILE_N / 4)) * 4;
            *reinterpret_cast<float4*>(&b_s[r * TILE_N + q]) =
                *reinterpret_cast<const float4*>(b_blk + (size_t)(kb + r) * n + q);
        }
        __syncthreads();
        for (int kk = 0; kk < TILE_K; ++kk) {
            for (int i = 0; i < ROWS_T; ++i) a_col[i] = a_t[kk * TILE_M + my_row * ROWS_T + i];
            for (int j = 0; j < COLS_T; ++j) b_row[j] = b_s[kk * TILE_N + my_col * COLS_T + j];
            for (int i = 0; i < ROWS_T; ++i)
                for (int j = 0; j < COLS_T; ++j)
                    out_frag[i * COLS_T + j] += a_col[i] * b_row[j];
        }
        __syncthreads();
    }
    float* c_blk = c_mat + (size_t)(blockIdx.y * TILE_M + my_row * ROWS_T) * n + blockIdx.x * TILE_N + my_col * COLS_T;
    for (int i = 0; i < ROWS_T; ++i)
        *reinterpret_cast<float4*>(c_blk + (size_t)i * n) =
            make_float4(out_frag[i * COLS_T], out_frag[i * COLS_T + 1], out_frag[i * COLS_T + 2], out_frag[i * COLS_T + 3]);
}

template __global__ void gemm_vec4<64, 64, 8, 4, 4>(const float*, const float*, float*, int, int, int);
