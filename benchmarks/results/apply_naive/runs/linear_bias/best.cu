// Tiled matrix product: bf16 in and out, fp32 accumulation; a [M, K] row-major, b [N, K] row-major (K-major: out
// = a @ b^T), out [M, N] row-major.
//   linear_bias: out = bias + a @ b^T (bias: N elements, added to every row in fp32)
// Mechanisms:
//   * a TM x TN tile of outputs per thread accumulated in registers from k-slices staged in shared memory;
//   * LINEAR_GROUP_M block rows sweep the N tiles together (L2 reuse).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

// ---- tuning constants (override with -DNAME=value; illegal combinations fail to compile, saying why) ----
#ifndef LINEAR_BM
#define LINEAR_BM 128  // output rows per block tile
#endif
#ifndef LINEAR_BN
#define LINEAR_BN 128  // output columns per block tile
#endif
#ifndef LINEAR_BK
#define LINEAR_BK 16  // k-extent of one staged slice
#endif
#ifndef LINEAR_TM
#define LINEAR_TM 16  // output rows per thread
#endif
#ifndef LINEAR_TN
#define LINEAR_TN 8  // output columns per thread
#endif
#ifndef LINEAR_GROUP_M
#define LINEAR_GROUP_M 8  // block rows that sweep the N tiles together (L2 reuse)
#endif

namespace {

typedef __nv_bfloat16 elem_t;

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
// launch an upper bound). Groups are numbered one after another; inside a problem, LINEAR_GROUP_M block rows
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
    const int per_group = LINEAR_GROUP_M * tiles_n;
    const int first_m = (idx / per_group) * LINEAR_GROUP_M;
    const int height = min(LINEAR_GROUP_M, tiles_m - first_m);
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

// Element (k, n) of the problem's b ([N, K] row-major: column n of the product is row n of b).
__device__ __forceinline__ float b_at(const elem_t* b, const MatmulDims& d, int k, int n) {
    return __bfloat162float(b[static_cast<long long>(n) * d.K + k]);
}

// Output element (r, c) of the problem (+ bias[c]), rounded once; rows past the problem are not written.
__device__ __forceinline__ void store_one(elem_t* out, const elem_t* bias, const MatmulDims& d, const Tile& t, int r,
                                          int c, float v) {
    if (r >= t.rows || c >= d.N) return;
    if (bias != nullptr) v += __bfloat162float(bias[c]);
    out[static_cast<long long>(r) * d.N + c] = __float2bfloat16_rn(v);
}


constexpr int kRegtileThreads = (LINEAR_BM / LINEAR_TM) * (LINEAR_BN / LINEAR_TN);
static_assert(LINEAR_BM % LINEAR_TM == 0 && LINEAR_BN % LINEAR_TN == 0, "LINEAR_BM / LINEAR_BN must be multiples of LINEAR_TM / LINEAR_TN");
static_assert((LINEAR_BM / LINEAR_TM) * (LINEAR_BN / LINEAR_TN) >= 32 && (LINEAR_BM / LINEAR_TM) * (LINEAR_BN / LINEAR_TN) <= 1024,
              "(LINEAR_BM / LINEAR_TM) * (LINEAR_BN / LINEAR_TN) threads must be 32 to 1024");
static_assert((LINEAR_BM + LINEAR_BN) * LINEAR_BK * 4 <= 48 * 1024, "the k-slices of a and b exceed 48 KB of static shared memory");

// LINEAR_TM x LINEAR_TN outputs per thread accumulated in registers from outer products of LINEAR_TM values of a and
// LINEAR_TN of b per k. k-slices of LINEAR_BK staged k-major in shared memory (LINEAR_BM x LINEAR_BN outputs per block).
__global__ void matmul_regtile_kernel(
    const elem_t* a, const elem_t* b, const elem_t* bias, const int* offs,
    elem_t* out, const MatmulDims d) {
    constexpr int kBlockThreads = (LINEAR_BM / LINEAR_TM) * (LINEAR_BN / LINEAR_TN);
    __shared__ float as[LINEAR_BK][LINEAR_BM];  // k-major
    __shared__ float bs[LINEAR_BK][LINEAR_BN];
    Tile t;
    if (!find_tile<LINEAR_BM, LINEAR_BN>(offs, d, t)) return;
    const elem_t* ta = tile_a(a, offs, d, t);
    const elem_t* tb = tile_b(b, d, t);
    const int tid = threadIdx.x;
    const int tr = tid / (LINEAR_BN / LINEAR_TN), tc = tid % (LINEAR_BN / LINEAR_TN);
    float acc[LINEAR_TM][LINEAR_TN];
    for (int i = 0; i < LINEAR_TM; ++i)
        for (int j = 0; j < LINEAR_TN; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < d.K; k0 += LINEAR_BK) {
        for (int i = tid; i < LINEAR_BK * LINEAR_BM; i += kBlockThreads) {
            const int r = i % LINEAR_BM, kk = i / LINEAR_BM;  // consecutive threads, consecutive rows
            as[kk][r] = (t.m0 + r < t.rows && k0 + kk < d.K)
                            ? __bfloat162float(ta[static_cast<long long>(t.m0 + r) * d.K + k0 + kk]) : 0.0f;
        }
        for (int i = tid; i < LINEAR_BK * LINEAR_BN; i += kBlockThreads) {
            const int c = i % LINEAR_BN, kk = i / LINEAR_BN;  // consecutive threads, consecutive columns of the tile
            bs[kk][c] = (t.n0 + c < d.N && k0 + kk < d.K) ? b_at(tb, d, k0 + kk, t.n0 + c) : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < LINEAR_BK; ++kk) {
            float x[LINEAR_TM], y[LINEAR_TN];
            for (int i = 0; i < LINEAR_TM; ++i) x[i] = as[kk][tr * LINEAR_TM + i];
            for (int j = 0; j < LINEAR_TN; ++j) y[j] = bs[kk][tc * LINEAR_TN + j];
            for (int i = 0; i < LINEAR_TM; ++i)
                for (int j = 0; j < LINEAR_TN; ++j) acc[i][j] += x[i] * y[j];
        }
        __syncthreads();
    }
    elem_t* tout = tile_out(out, offs, d, t);
    for (int i = 0; i < LINEAR_TM; ++i) {
        const int r = t.m0 + tr * LINEAR_TM + i;
        for (int j = 0; j < LINEAR_TN; ++j) store_one(tout, bias, d, t, r, t.n0 + tc * LINEAR_TN + j, acc[i][j]);
    }
}


// out = a @ b^T (+ bias) for `batch` dense problems, or for the groups of rows offs delimits.
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
    if (tiles_of(LINEAR_BM, LINEAR_BN) > 0x7fffffffLL) return cudaErrorInvalidValue;
    const dim3 grid_fb(static_cast<unsigned>(tiles_of(LINEAR_BM, LINEAR_BN)), zdim);
    matmul_regtile_kernel<<<grid_fb, kRegtileThreads, 0, stream>>>(
        a, b, bias, offs, out, d);
    return cudaGetLastError();
}

}  // namespace

// linear_bias: out = bias + a @ b (bias: N elements, added to every row in fp32) (b^T)
extern "C" cudaError_t linear_bias(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias,
                                   __nv_bfloat16* out, int M, int N, int K, cudaStream_t stream) {
    return launch_matmul(x, weight, bias, nullptr, out, 1, 0, M, N, K, stream);
}
