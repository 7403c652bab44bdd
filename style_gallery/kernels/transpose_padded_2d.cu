// Matrix transpose through a shared tile with one extra column (TDIM + 1), so that reading a
// column of the tile touches 32 different banks. Each thread moves TDIM / ROWS_PER_PASS elements.
const int TDIM = 32;
const int ROWS_PER_PASS = 8;

__global__ void transpose_tile_pad(float* dst, const float* src, int ncols, int nrows)
{
    __shared__ float stage[TDIM][TDIM + 1];

    const int col_in = blockIdx.x * TDIM + threadIdx.x;
    const int row_in = blockIdx.y * TDIM + threadIdx.y;
    for (int step = 0; step < TDIM; step += ROWS_PER_PASS) {
        const int r = row_in + step;
        if (col_in < ncols && r < nrows)
            stage[threadIdx.y + step][threadIdx.x] = src[(size_t)r * ncols + col_in];
    }
    __syncthreads();

    const int col_out = blockIdx.y * TDIM + threadIdx.x;
    const int row_out = blockIdx.x * TDIM + threadIdx.y;
    for (int step = 0; step < TDIM; step += ROWS_PER_PASS) {
        const int r = row_out + step;
        if (col_out < nrows && r < ncols)
            dst[(size_t)r * nrows + col_out] = stage[threadIdx.x][threadIdx.y + step];
    }
}
