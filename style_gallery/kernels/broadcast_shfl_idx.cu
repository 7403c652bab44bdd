// Gather by row index: lane 0 reads the index, broadcasts it to the warp with __shfl_sync, and the
// warp copies that row. Shuffles here move values, they reduce nothing.
__global__ void gather_rows(const float* __restrict__ table, const int* __restrict__ idx, float* __restrict__ out, int dim)
{
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    int row = 0;
    if (lane == 0) row = idx[warp];
    row = __shfl_sync(0xffffffff, row, 0);
    for (int c = lane; c < dim; c += 32)
        out[(size_t)warp * dim + c] = table[(size_t)row * dim + c];
}
