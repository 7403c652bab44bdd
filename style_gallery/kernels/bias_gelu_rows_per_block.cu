// Bias + GELU over a (rows, cols) activation: each block walks four consecutive rows, its threads
// striding over the columns of each, so a block's bias loads are reused four times.
#include <math.h>

__global__ void bias_gelu_rows(float* __restrict__ out, const float* __restrict__ inp,
                               const float* __restrict__ bias, int rows, int cols) {
    for (int r = 0; r < 4; ++r) {
        const int row = blockIdx.x * 4 + r;
        if (row >= rows) return;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            float v = inp[(size_t)row * cols + c] + bias[c];
            float cube = 0.044715f * v * v * v;
            out[(size_t)row * cols + c] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + cube)));
        }
    }
}
