// y = A x for a tall matrix, a warp per row and eight rows per block; x is streamed through shared
// memory in tiles, double buffered in one array: the offset of the tile being filled flips between
// 0 and TILE with an xor while the other tile is read.
#define TILE 256

__global__ void gemv_rows_db(const float* __restrict__ A, const float* __restrict__ x, float* __restrict__ y,
                             int rows, int cols) {
    __shared__ float xs[2 * TILE];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * 8 + warp;

    int off = 0;
    if (threadIdx.x < TILE && threadIdx.x < cols) xs[threadIdx.x] = x[threadIdx.x];
    __syncthreads();

    float sum = 0.0f;
    for (int t = 0; t < cols; t += TILE) {
        int nxt = off ^ TILE;
        int c = t + TILE + threadIdx.x;
        if (threadIdx.x < TILE && c < cols) xs[nxt + threadIdx.x] = x[c];
        if (row < rows)
            for (int j = lane; j < TILE && t + j < cols; j += 32) sum += A[(size_t)row * cols + t + j] * xs[off + j];
        __syncthreads();
        off = nxt;
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffff, sum, o);
    if (lane == 0 && row < rows) y[row] = sum;
}
