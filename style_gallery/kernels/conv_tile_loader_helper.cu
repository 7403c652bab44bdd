// 2-D convolution (3x3, single channel pair) where the input tile is staged by a loader helper that
// takes the shared buffer as a plain pointer; the kernel then computes from the staged tile.
#define TILE_W 32
#define TILE_H 8

__device__ void load_input_tile(float* dst, const float* src, int x0, int y0, int width, int height, int pitch)
{
    for (int i = threadIdx.y * TILE_W + threadIdx.x; i < (TILE_H + 2) * (TILE_W + 2); i += TILE_W * TILE_H) {
        int ty = i / (TILE_W + 2), tx = i % (TILE_W + 2);
        int gx = x0 + tx - 1, gy = y0 + ty - 1;
        dst[i] = (gx >= 0 && gx < width && gy >= 0 && gy < height) ? src[gy * pitch + gx] : 0.0f;
    }
}

__global__ void conv3x3(const float* __restrict__ in, const float* __restrict__ k9, float* __restrict__ out,
                        int width, int height)
{
    __shared__ float tile[(TILE_H + 2) * (TILE_W + 2)];
    const int x0 = blockIdx.x * TILE_W, y0 = blockIdx.y * TILE_H;
    load_input_tile(tile, in, x0, y0, width, height, width);
    __syncthreads();
    float acc = 0.f;
    for (int dy = 0; dy < 3; ++dy)
        for (int dx = 0; dx < 3; ++dx)
            acc += k9[dy * 3 + dx] * tile[(threadIdx.y + dy) * (TILE_W + 2) + threadIdx.x + dx];
    const int x = x0 + threadIdx.x, y = y0 + threadIdx.y;
    if (x < width && y < height) out[y * width + x] = acc;
}
