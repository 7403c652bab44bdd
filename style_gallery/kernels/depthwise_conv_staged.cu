// Depthwise 3x3 convolution: each block stages an input tile with a one-pixel border into shared
// memory (2-D tile indices, loaded by a strided loop), and each thread computes OUTS_PER_THREAD
// horizontally adjacent outputs from it.
#define TW 32
#define TH 8
#define OUTS_PER_THREAD 2

__global__ void dwconv3x3(const float* __restrict__ in, const float* __restrict__ w, float* __restrict__ out,
                          int H, int W)
{
    __shared__ float tile[TH + 2][TW * OUTS_PER_THREAD + 2];
    const int c = blockIdx.z;
    const float* src = in + (size_t)c * H * W;
    const int x0 = blockIdx.x * TW * OUTS_PER_THREAD - 1, y0 = blockIdx.y * TH - 1;

    for (int idx = threadIdx.y * TW + threadIdx.x; idx < (TH + 2) * (TW * OUTS_PER_THREAD + 2); idx += TW * TH) {
        int ty = idx / (TW * OUTS_PER_THREAD + 2), tx = idx % (TW * OUTS_PER_THREAD + 2);
        int gy = y0 + ty, gx = x0 + tx;
        tile[ty][tx] = (gy >= 0 && gy < H && gx >= 0 && gx < W) ? src[gy * W + gx] : 0.f;
    }
    __syncthreads();

    float k[9];
    for (int i = 0; i < 9; ++i) k[i] = w[c * 9 + i];
    for (int o = 0; o < OUTS_PER_THREAD; ++o) {
        int lx = threadIdx.x * OUTS_PER_THREAD + o, ly = threadIdx.y;
        float acc = 0.f;
        for (int dy = 0; dy < 3; ++dy)
            for (int dx = 0; dx < 3; ++dx) acc += k[dy * 3 + dx] * tile[ly + dy][lx + dx];
        int gx = x0 + 1 + lx, gy = y0 + 1 + ly;
        if (gx < W && gy < H) out[(size_t)c * H * W + gy * W + gx] = acc;
    }
}
