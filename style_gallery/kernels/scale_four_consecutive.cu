// y = a * x + b over a flat array, each thread taking four consecutive elements.
__global__ void affine4(const float* __restrict__ x, float* __restrict__ y, float a, float b, int n) {
    int base = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    for (int j = 0; j < 4; j++) {
        int i = base + j;
        if (i < n) y[i] = a * x[i] + b;
    }
}
