#pragma once
namespace nvcuda { namespace wmma {
struct matrix_a {}; struct matrix_b {}; struct accumulator {}; struct row_major {}; struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment { T x[8]; int num_elements; };
template <class F, class T> __device__ void load_matrix_sync(F&, const T*, unsigned);
template <class F, class T> __device__ void load_matrix_sync(F&, const T*, unsigned, layout_t);
template <class F, class T> __device__ void store_matrix_sync(T*, const F&, unsigned, layout_t);
template <class F, class T> __device__ void fill_fragment(F&, T);
template <class D, class A, class B, class C> __device__ void mma_sync(D&, const A&, const B&, const C&);
} }
