#include <cuda_runtime.h>
#include <math.h>

// kernel 2: still one thread per row, but the max and the sum come from one sweep: the sum so far
// is rescaled from the old maximum to the new one at every element.
__global__ void softmax_forward_kernel2(float* out, const float* inp, int N, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        const float* inp_row = inp + (size_t)i * C;
        float* out_row = out + (size_t)i * C;

        float maxval = -INFINITY;
        float sum = 0.0f;
        for (int j = 0; j < C; j++) {
            const float old_max = maxval;
            if (inp_row[j] > maxval) maxval = inp_row[j];
            sum = sum * expf(old_max - maxval) + expf(inp_row[j] - maxval);
        }
        float norm = 1.0f / sum;
        for (int j = 0; j < C; j++) {
            out_row[j] = expf(inp_row[j] - maxval) * norm;
        }
    }
}

extern "C" cudaError_t softmax_forward(const float* inp, float* out, int N, int C, cudaStream_t stream) {
    const int block_size = 256;
    const int grid_size = (N + block_size - 1) / block_size;
    softmax_forward_kernel2<<<grid_size, block_size, 0, stream>>>(out, inp, N, C);
    return cudaGetLastError();
}
