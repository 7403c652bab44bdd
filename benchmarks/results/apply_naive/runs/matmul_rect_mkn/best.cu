// Tiled matrix product: fp32 in and out, fp32 accumulation; a [M, K] row-major, b [K, N] row-major, out [M, N]
// row-major.
//   gemm: out = a @ b
// Mechanisms:
//   * a TM x TN tile of outputs per thread accumulated in registers from k-slices staged in shared memory;
//   * MM_GROUP_M block rows sweep the N tiles together (L2 reuse).
#include <cuda_runtime.h>
#include <stdint.h>

// ---- tuning constants (override with -DNAME=value; illegal combinations fail to compile, saying why) ----
#ifndef MM_BM
#define MM_BM 64  // output rows per block tile
#endif
#ifndef MM_BN
#define MM_BN 128  // output columns per block tile
#endif
#ifndef MM_BK
#define MM_BK 16  // k-extent of one staged slice
#endif
#ifndef MM_TM
#define MM_TM 8  // output rows per thread
#endif
#ifndef MM_TN
#define MM_TN 8  // output columns per thread
#endif
#ifndef MM_GROUP_M
#define MM_GROUP_M 8  // block rows that sweep the N tiles together (L2 reuse)
#endif

namespace {

typedef float elem_t;

// Sizes and strides of one call: `groups` > 0 with offs (grouped rows), else dense batches along blockIdx.y.
struct MatmulDims {
    int M, N, K, groups;
    long long batch_stride_a, batch_stride_b, batch_stride_out;
};

// The output tile of one block: its problem (batch, or group of rows), that problem's rows and first
// row in a, and the tile's origin.
struct Tile {
    int z;        // batch or group
    int rows;     // rows of the problem (M, or the group's)
    int row0;     // first row of the problem in a and out (the group's start; 0 for batches)
    int m0, n0;   // tile origin inside the problem
};

// Tile of linear block index blockIdx.x in a kBM x kBN tiling; false past the last tile (grouped calls
// launch an upper bound). Groups are numbered one after another; inside a problem, MM_GROUP_M block rows
// sweep the N tiles together (blocks in flight share panels of a and b in L2).
template <int kBM, int kBN>
__device__ __forceinline__ bool find_tile(const int* offs, const MatmulDims& d, Tile& t) {
    const int tiles_n = (d.N + kBN - 1) / kBN;
    int idx = blockIdx.x;
    if (offs != nullptr) {
        int start = 0;
        t.z = -1;
        for (int g = 0; g < d.groups; ++g) {
            const int end = min(max(offs[g], start), d.M);
            const int tiles = (end - start + kBM - 1) / kBM * tiles_n;
            if (idx < tiles) {
                t.z = g;
                t.rows = end - start;
                break;
            }
            idx -= tiles;
            start = end;
        }
        if (t.z < 0) return false;  // block-uniform, before any barrier
        t.row0 = start;
    } else {
        t.z = blockIdx.y;
        t.rows = d.M;
        t.row0 = 0;
    }
    const int tiles_m = (t.rows + kBM - 1) / kBM;
    const int per_group = MM_GROUP_M * tiles_n;
    const int first_m = (idx / per_group) * MM_GROUP_M;
    const int height = min(MM_GROUP_M, tiles_m - first_m);
    const int in_group = idx % per_group;
    t.m0 = (first_m + in_group % height) * kBM;
    t.n0 = (in_group / height) * kBN;
    return true;
}

// The problem's a, b and out of a tile.
__device__ __forceinline__ const elem_t* tile_a(const elem_t* a, const int* offs, const MatmulDims& d, const Tile& t) {
    return offs != nullptr ? a + static_cast<long long>(t.row0) * d.K : a + t.z * d.batch_stride_a;
}
__device__ __forceinline__ const elem_t* tile_b(const elem_t* b, const MatmulDims& d, const Tile& t) {
    return b + t.z * d.batch_stride_b;
}
__device__ __forceinline__ elem_t* tile_out(elem_t* out, const int* offs, const MatmulDims& d, const Tile& t) {
    return offs != nullptr ? out + static_cast<long long>(t.row0) * d.N : out + t.z * d.batch_stride_out;
}

// Element (k, n) of the problem's b ([K, N] row-major).
__device__ __forceinline__ float b_at(const elem_t* b, const MatmulDims& d, int k, int n) {
    return (b[static_cast<long long>(k) * d.N + n]);
}

// Output element (r, c) of the problem (+ bias[c]), rounded once; rows past the problem are not written.
__device__ __forceinline__ void store_one(elem_t* out, const elem_t* bias, const MatmulDims& d, const Tile& t, int r,
                                          int c, float v) {
    if (r >= t.rows || c >= d.N) return;
    if (bias != nullptr) v += (bias[c]);
    out[static_cast<long long>(r) * d.N + c] = (v);
}


constexpr int kRegtileThreads = (MM_BM / MM_TM) * (MM_BN / MM_TN);
static_assert(MM_BM % MM_TM == 0 && MM_BN % MM_TN == 0, "MM_BM / MM_BN must be multiples of MM_TM / MM_TN");
static_assert((MM_BM / MM_TM) * (MM_BN / MM_TN) >= 32 && (MM_BM / MM_TM) * (MM_BN / MM_TN) <= 1024,
              "(MM_BM / MM_TM) * (MM_BN / MM_TN) threads must be 32 to 1024");
static_assert((MM_BM + MM_BN) * MM_BK * 4 <= 48 * 1024, "the k-slices of a and b exceed 48 KB of static shared memory");

// MM_TM x MM_TN outputs per thread accumulated in registers from outer products of MM_TM values of a and
// MM_TN of b per k. k-slices of MM_BK staged k-major in shared memory (MM_BM x MM_BN outputs per block).
__global__ void matmul_regtile_kernel(
    const elem_t* a, const elem_t* b, const elem_t* bias, const int* offs,
    elem_t* out, const MatmulDims d) {
    constexpr int kBlockThreads = (MM_BM / MM_TM) * (MM_BN / MM_TN);
    __shared__ float as[MM_BK][MM_BM];  // k-major
    __shared__ float bs[MM_BK][MM_BN];
    Tile t;
    if (!find_tile<MM_BM, MM_BN>(offs, d, t)) return;
    const elem_t* ta = tile_a(a, offs, d, t);
    const elem_t* tb = tile_b(b, d, t);
    const int tid = threadIdx.x;
    const int tr = tid / (MM_BN / MM_TN), tc = tid % (MM_BN / MM_TN);
    float acc[MM_TM][MM_TN];
    for (int i = 0; i < MM_TM; ++i)
        for (int j = 0; j < MM_TN; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < d.K; k0 += MM_BK) {
        for (int i = tid; i < MM_BK * MM_BM; i += kBlockThreads) {
            const int r = i % MM_BM, kk = i / MM_BM;  // consecutive threads, consecutive rows
            as[kk][r] = (t.m0 + r < t.rows && k0 + kk < d.K)
                            ? (ta[static_cast<long long>(t.m0 + r) * d.K + k0 + kk]) : 0.0f;
        }
        for (int i = tid; i < MM_BK * MM_BN; i += kBlockThreads) {
            const int c = i % MM_BN, kk = i / MM_BN;  // consecutive threads, consecutive columns of the tile
            bs[kk][c] = (t.n0 + c < d.N && k0 + kk < d.K) ? b_at(tb, d, k0 + kk, t.n0 + c) : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < MM_BK; ++kk) {
            float x[MM_TM], y[MM_TN];
            for (int i = 0; i < MM_TM; ++i) x[i] = as[kk][tr * MM_TM + i];
            for (int j = 0; j < MM_TN; ++j) y[j] = bs[kk][tc * MM_TN + j];
            for (int i = 0; i < MM_TM; ++i)
                for (int j = 0; j < MM_TN; ++j) acc[i][j] += x[i] * y[j];
        }
        __syncthreads();
    }
    elem_t* tout = tile_out(out, offs, d, t);
    for (int i = 0; i < MM_TM; ++i) {
        const int r = t.m0 + tr * MM_TM + i;
        for (int j = 0; j < MM_TN; ++j) store_one(tout, bias, d, t, r, t.n0 + tc * MM_TN + j, acc[i][j]);
    }
}


// out = a @ b (+ bias) for `batch` dense problems, or for the groups of rows offs delimits.
cudaError_t launch_matmul(const elem_t* a, const elem_t* b, const elem_t* bias, const int* offs, elem_t* out, int batch,
                          int groups, int M, int N, int K, cudaStream_t stream) {
    if (batch <= 0 || M <= 0 || N <= 0 || (offs != nullptr && groups <= 0)) return cudaSuccess;
    if (K < 0 || batch > 65535) return cudaErrorInvalidValue;
    MatmulDims d;
    d.M = M;
    d.N = N;
    d.K = K;
    d.groups = offs != nullptr ? groups : 0;
    d.batch_stride_a = static_cast<long long>(M) * K;
    d.batch_stride_b = static_cast<long long>(K) * N;
    d.batch_stride_out = static_cast<long long>(M) * N;
    const unsigned zdim = offs != nullptr ? 1u : static_cast<unsigned>(batch);
    // Tiles of a tm x tn tiling: every group adds at most one partial row tile.
    auto tiles_of = [&](int tm, int tn) {
        const long long rows = offs != nullptr ? (M + tm - 1) / tm + groups - 1 : (M + tm - 1) / tm;
        return rows * ((N + tn - 1) / tn);
    };
    if (tiles_of(MM_BM, MM_BN) > 0x7fffffffLL) return cudaErrorInvalidValue;
    const dim3 grid_fb(static_cast<unsigned>(tiles_of(MM_BM, MM_BN)), zdim);
    matmul_regtile_kernel<<<grid_fb, kRegtileThreads, 0, stream>>>(
        a, b, bias, offs, out, d);
    return cudaGetLastError();
}

}  // namespace

// gemm: out = a @ b
extern "C" cudaError_t gemm(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream) {
    return launch_matmul(A, B, nullptr, nullptr, C, 1, 0, M, N, K, stream);
}
