#pragma once
namespace cooperative_groups {
struct thread_block {
    __device__ void sync() const; __device__ unsigned int thread_rank() const; __device__ unsigned int size() const;
    __device__ unsigned int num_threads() const;
};
struct cluster_group {
    __device__ void sync() const; __device__ unsigned int block_rank() const; __device__ unsigned int num_blocks() const;
    template <class T> __device__ T* map_shared_rank(T* addr, unsigned int rank) const;
};
template <unsigned int N> struct thread_block_tile {
    __device__ void sync() const; __device__ unsigned int thread_rank() const;
    __device__ unsigned int size() const; __device__ unsigned int num_threads() const;
    __device__ unsigned int meta_group_rank() const; __device__ unsigned int meta_group_size() const;
    template <class T> __device__ T shfl(T, unsigned int) const;
    template <class T> __device__ T shfl_down(T, unsigned int) const;
    template <class T> __device__ T shfl_up(T, unsigned int) const;
    template <class T> __device__ T shfl_xor(T, unsigned int) const;
};
__device__ thread_block this_thread_block();
__device__ cluster_group this_cluster();
template <unsigned int N, class P> __device__ thread_block_tile<N> tiled_partition(const P&);
template <class T> struct plus { __device__ T operator()(T, T) const; };
template <class T> struct less { __device__ T operator()(T, T) const; };
template <class T> struct greater { __device__ T operator()(T, T) const; };
template <class G, class T, class Op> __device__ T reduce(const G&, T, Op);
template <class G> __device__ void memcpy_async(const G&, void*, const void*, unsigned long);
template <class G> __device__ void wait(const G&);
template <class G> __device__ void wait_prior(const G&);
}
