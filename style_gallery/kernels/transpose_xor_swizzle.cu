// Transpose without padding: the tile column is XOR-swizzled with the row (col ^ row), which
// spreads a column walk over all banks while keeping the tile exactly 32x32.
template <typename T>
__global__ void transpose_swizzled(const T* __restrict__ src, T* __restrict__ dst, int n)
{
    __shared__ T tile[32][32];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int bx = blockIdx.x * 32, by = blockIdx.y * 32;
    for (int r = ty; r < 32; r += 8)
        tile[r][tx ^ (r & 31)] = src[(size_t)(by + r) * n + bx + tx];
    __syncthreads();
    for (int r = ty; r < 32; r += 8)
        dst[(size_t)(bx + r) * n + by + tx] = tile[tx][r ^ (tx & 31)];
}

template __global__ void transpose_swizzled<float>(const float*, float*, int);
