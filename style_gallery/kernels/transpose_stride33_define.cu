// Out-of-place transpose of a batch of 32x32 tiles; the shared tile's row stride is spelled as its
// own constant, 33 floats for 32 columns.
#define TILE 32
#define SMEM_STRIDE 33

__global__ void batched_tile_transpose(const float* __restrict__ src, float* __restrict__ dst, int tiles) {
    __shared__ float buf[TILE][SMEM_STRIDE];
    const int t = blockIdx.x;
    if (t >= tiles) return;
    const float* s = src + (size_t)t * TILE * TILE;
    float* d = dst + (size_t)t * TILE * TILE;
    for (int r = threadIdx.y; r < TILE; r += blockDim.y) buf[r][threadIdx.x] = s[r * TILE + threadIdx.x];
    __syncthreads();
    for (int r = threadIdx.y; r < TILE; r += blockDim.y) d[r * TILE + threadIdx.x] = buf[threadIdx.x][r];
}
