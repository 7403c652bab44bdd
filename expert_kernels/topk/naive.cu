// topk naive: one thread per row picks the k largest elements one after another, each time
// scanning the whole row for the largest element below the one picked last: O(k * length) serial
// work per row, scalar loads, no cooperation between threads.
//
// Order: elements are ranked by (key, column) where key is the float's bit pattern mapped to an
// unsigned integer that sorts like the float (-inf < ... < -0.0 < +0.0 < ... < +inf), ties broken
// by the lower column first. Packed as key << 32 | (0xffffffff - column), the 64-bit numbers of a
// row are all distinct and larger is better, so "the next largest below the last pick" is exact
// even when values repeat.
#include <cuda_runtime.h>

__device__ unsigned int float_to_key(float f) {
    unsigned int u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ float key_to_float(unsigned int key) {
    unsigned int u = (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
    return __uint_as_float(u);
}

__global__ void topk_naive_kernel(const float* x, float* values, int* indices, int batch, int length,
                                  int k) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= batch) return;
    const float* xr = x + (long long)row * length;
    unsigned long long last = 0;
    for (int out = 0; out < k; ++out) {
        unsigned long long best = 0;  // below every real element (its low word is never 0)
        for (int j = 0; j < length; ++j) {
            unsigned long long c = ((unsigned long long)float_to_key(xr[j]) << 32) | (0xffffffffu - (unsigned int)j);
            if ((out == 0 || c < last) && c > best) best = c;
        }
        values[(long long)row * k + out] = key_to_float((unsigned int)(best >> 32));
        indices[(long long)row * k + out] = (int)(0xffffffffu - (unsigned int)best);
        last = best;
    }
}

extern "C" cudaError_t topk(const float* x, float* values, int* indices, int batch, int length, int k, cudaStream_t stream) {
    int block = 64;
    int grid = (batch + block - 1) / block;
    topk_naive_kernel<<<grid, block, 0, stream>>>(x, values, indices, batch, length, k);
    return cudaGetLastError();
}
