// klineage-step: mechanism=block_per_row
// One block per row instead of one thread: the block's threads rank the row's elements in parallel.
//
// Each thread ranks its own elements by counting the elements of the row that beat them, and
// writes every element whose rank is below k straight to its output slot.
//
// rank(i) = #{j : c_j > c_i} with c the distinct 64-bit (key, column) numbers of the naive kernel,
// so ranks are a permutation of 0..length-1 and the elements of rank < k, written at their rank,
// are the sorted top k: no ordering pass, no barrier. O(length^2 / blockDim) work per thread.
#include <cuda_runtime.h>

#ifndef TOPK_BLOCK
#define TOPK_BLOCK 1024        // threads per row
#endif

__device__ __forceinline__ unsigned int float_to_key(float f) {
    unsigned int u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_to_float(unsigned int key) {
    unsigned int u = (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
    return __uint_as_float(u);
}

// key in the high word, the column inverted in the low word: larger is better, and ties of equal
// values go to the lower column.
__device__ __forceinline__ unsigned long long pack(unsigned int key, int col) {
    return ((unsigned long long)key << 32) | (0xffffffffu - (unsigned int)col);
}

__device__ __forceinline__ void write_out(float* values, int* indices, long long at, unsigned long long c) {
    values[at] = key_to_float((unsigned int)(c >> 32));
    indices[at] = (int)(0xffffffffu - (unsigned int)c);
}

// Every row, any length and k: count how many elements of the row beat each element.
__global__ void topk_rank_global_kernel(const float* x, float* values, int* indices, int length, int k) {
    const float* row = x + (long long)blockIdx.x * length;
    const long long out0 = (long long)blockIdx.x * k;
    for (int i = threadIdx.x; i < length; i += blockDim.x) {
        const unsigned long long mine = pack(float_to_key(row[i]), i);
        int rank = 0;
        for (int j = 0; j < length; ++j) rank += pack(float_to_key(row[j]), j) > mine;
        if (rank < k) write_out(values, indices, out0 + rank, mine);
    }
}

extern "C" cudaError_t topk(const float* x, float* values, int* indices, int batch, int length, int k, cudaStream_t stream) {
    topk_rank_global_kernel<<<batch, TOPK_BLOCK, 0, stream>>>(x, values, indices, length, k);
    return cudaGetLastError();
}
