// klineage-step: mechanism=smem_staging
// The row is copied into shared memory once; the length x length comparisons then read it there.
//
// Rows longer than the buffer (TOPK_SMEM_ELEMS floats) keep the global-memory kernel. Each thread
// still ranks its own elements by counting the elements of the row that beat them.
//
// rank(i) = #{j : c_j > c_i} with c the distinct 64-bit (key, column) numbers of the naive kernel,
// so ranks are a permutation of 0..length-1 and the elements of rank < k, written at their rank,
// are the sorted top k: no ordering pass, no barrier. O(length^2 / blockDim) work per thread.
#include <cuda_runtime.h>

#ifndef TOPK_BLOCK
#define TOPK_BLOCK 1024        // threads per row
#endif
#ifndef TOPK_SMEM_ELEMS
#define TOPK_SMEM_ELEMS 8192   // longest row staged in shared memory (32 KB)
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

// Rows of at most TOPK_SMEM_ELEMS: the comparisons read a shared-memory copy of the row.
__global__ void topk_rank_staged_kernel(const float* x, float* values, int* indices, int length, int k) {
    __shared__ float s_row[TOPK_SMEM_ELEMS];
    const float* row = x + (long long)blockIdx.x * length;
    const long long out0 = (long long)blockIdx.x * k;
    for (int i = threadIdx.x; i < length; i += blockDim.x) s_row[i] = row[i];
    __syncthreads();
    for (int i = threadIdx.x; i < length; i += blockDim.x) {
        const unsigned long long mine = pack(float_to_key(s_row[i]), i);
        int rank = 0;
        for (int j = 0; j < length; ++j) rank += pack(float_to_key(s_row[j]), j) > mine;
        if (rank < k) write_out(values, indices, out0 + rank, mine);
    }
}

extern "C" cudaError_t topk(const float* x, float* values, int* indices, int batch, int length, int k, cudaStream_t stream) {
    if (length <= TOPK_SMEM_ELEMS)
        topk_rank_staged_kernel<<<batch, TOPK_BLOCK, 0, stream>>>(x, values, indices, length, k);
    else
        topk_rank_global_kernel<<<batch, TOPK_BLOCK, 0, stream>>>(x, values, indices, length, k);
    return cudaGetLastError();
}
