// 5-point stencil on a 2-D grid: each block stages a (BY + 2) x (BX + 2) tile with a one-cell halo
// in shared memory (edge threads also load the halo), then every thread combines five values from
// the tile.
#define BX 32
#define BY 8

__global__ void stencil5(const float * __restrict__ u, float * __restrict__ v, int nx, int ny, float c0, float c1)
{
    __shared__ float s[BY + 2][BX + 2];
    const int gx = blockIdx.x * BX + threadIdx.x;
    const int gy = blockIdx.y * BY + threadIdx.y;
    const int lx = threadIdx.x + 1, ly = threadIdx.y + 1;
    const bool inside = gx < nx && gy < ny;

    if (inside) s[ly][lx] = u[gy * nx + gx];
    if (threadIdx.x == 0 && gx > 0 && gy < ny) s[ly][0] = u[gy * nx + gx - 1];
    if (threadIdx.x == BX - 1 && gx + 1 < nx && gy < ny) s[ly][BX + 1] = u[gy * nx + gx + 1];
    if (threadIdx.y == 0 && gy > 0 && gx < nx) s[0][lx] = u[(gy - 1) * nx + gx];
    if (threadIdx.y == BY - 1 && gy + 1 < ny && gx < nx) s[BY + 1][lx] = u[(gy + 1) * nx + gx];
    __syncthreads();

    if (inside && gx > 0 && gy > 0 && gx + 1 < nx && gy + 1 < ny)
        v[gy * nx + gx] = c0 * s[ly][lx] + c1 * (s[ly][lx - 1] + s[ly][lx + 1] + s[ly - 1][lx] + s[ly + 1][lx]);
}
