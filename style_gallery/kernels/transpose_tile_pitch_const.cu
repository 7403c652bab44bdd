// Matrix transpose through a shared tile whose row pitch is a named constant one wider than the
// tile, so reading a column of the tile touches 32 different banks.
constexpr int TILE_DIM = 32;
constexpr int BLOCK_ROWS = 8;
constexpr int TILE_PITCH = TILE_DIM + 1;

__global__ void transpose_no_bank_conflicts(float* __restrict__ odata, const float* __restrict__ idata,
                                            int width, int height) {
    __shared__ float tile[TILE_DIM][TILE_PITCH];

    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        if (x < width && y + j < height) tile[threadIdx.y + j][threadIdx.x] = idata[(y + j) * width + x];

    __syncthreads();

    x = blockIdx.y * TILE_DIM + threadIdx.x;
    y = blockIdx.x * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        if (x < height && y + j < width) odata[(y + j) * height + x] = tile[threadIdx.x][threadIdx.y + j];
}
