#include <cuda_runtime.h>
#include <math.h>

// kernel 3: back to kernel 1's three passes, now with a whole block per row. Threads stride over
// the row and a shared-memory tree combines their partial max, then their partial sums.
__global__ void softmax_forward_kernel3(float* out, const float* inp, int N, int C) {
    extern __shared__ float shared[];
    int idx = blockIdx.x;
    int tid = threadIdx.x;
    int block_size = blockDim.x;
    const float* x = inp + (size_t)idx * C;

    float maxval = -INFINITY;
    for (int i = tid; i < C; i += block_size) {
        maxval = fmaxf(maxval, x[i]);
    }
    shared[tid] = maxval;
    __syncthreads();
    for (int stride = block_size / 2; stride >= 1; stride /= 2) {
        if (tid < stride) {
            shared[tid] = fmaxf(shared[tid], shared[tid + stride]);
        }
        __syncthreads();
    }
    float offset = shared[0];
    __syncthreads();

    float sumval = 0.0f;
    for (int i = tid; i < C; i += block_size) {
        sumval += expf(x[i] - offset);
    }
    shared[tid] = sumval;
    __syncthreads();
    for (int stride = block_size / 2; stride >= 1; stride /= 2) {
        if (tid < stride) {
            shared[tid] += shared[tid + stride];
        }
        __syncthreads();
    }
    float sum = shared[0];

    for (int i = tid; i < C; i += block_size) {
        out[(size_t)idx * C + i] = expf(x[i] - offset) / sum;
    }
}

extern "C" cudaError_t softmax_forward(const float* inp, float* out, int N, int C, cudaStream_t stream) {
    const int block_size = 256;
    softmax_forward_kernel3<<<N, block_size, block_size * sizeof(float), stream>>>(out, inp, N, C);
    return cudaGetLastError();
}
