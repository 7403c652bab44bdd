#include <cuda_runtime.h>
#include <math.h>

// kernel 1: the CPU loop moved onto the GPU, one thread per row: max, then exp and sum, then scale.
__global__ void softmax_forward_kernel1(float* out, const float* inp, int N, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        const float* inp_row = inp + (size_t)i * C;
        float* out_row = out + (size_t)i * C;

        float maxval = -INFINITY;
        for (int j = 0; j < C; j++) {
            if (inp_row[j] > maxval) {
                maxval = inp_row[j];
            }
        }
        float sum = 0.0f;
        for (int j = 0; j < C; j++) {
            out_row[j] = expf(inp_row[j] - maxval);
            sum += out_row[j];
        }
        float norm = 1.0f / sum;
        for (int j = 0; j < C; j++) {
            out_row[j] *= norm;
        }
    }
}

extern "C" cudaError_t softmax_forward(const float* inp, float* out, int N, int C, cudaStream_t stream) {
    const int block_size = 256;
    const int grid_size = (N + block_size - 1) / block_size;
    softmax_forward_kernel1<<<grid_size, block_size, 0, stream>>>(out, inp, N, C);
    return cudaGetLastError();
}
