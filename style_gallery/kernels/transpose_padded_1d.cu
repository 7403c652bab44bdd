// Transpose with a flat shared buffer: the tile is one array of TILE * (TILE + 1) floats, rows
// addressed as r * (TILE + 1) + c by hand.
#define TILE 32

__global__ void transpose_flat(const float *__restrict__ in, float *__restrict__ out, int rows, int cols)
{
    __shared__ float buf[TILE * (TILE + 1)];
    const int c = blockIdx.x * TILE + threadIdx.x;
    for (int r = threadIdx.y; r < TILE; r += blockDim.y) {
        int gr = blockIdx.y * TILE + r;
        if (gr < rows && c < cols) buf[r * (TILE + 1) + threadIdx.x] = in[(size_t)gr * cols + c];
    }
    __syncthreads();
    const int oc = blockIdx.y * TILE + threadIdx.x;
    for (int r = threadIdx.y; r < TILE; r += blockDim.y) {
        int orow = blockIdx.x * TILE + r;
        if (orow < cols && oc < rows) out[(size_t)orow * rows + oc] = buf[threadIdx.x * (TILE + 1) + r];
    }
}
