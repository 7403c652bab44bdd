"""Forms of six families as public code writes them, each next to the same code without the
mechanism: online softmax with the old maximum kept aside in a branch, raised before the rescale,
written inline, or merged by an operator on (max, sum) pairs; coarsening by loop structure under any
name; padding through a named constant; a register tile whose outer product is in a helper; a double
buffer in one flat array reached by a computed stage offset; a reduction tree unrolled by steps on a
template parameter. The 'after' snippet is seen (detect_seen, not removable), the 'before' is not;
every snippet builds with nvcc."""
import pytest

from mechtest import dedent
from klineage.mechanisms import detect_seen


def seen(src: str, family: str) -> list:
    return [f for f in detect_seen(src) if f.mechanism == family]


# (family, name) -> (before, after): the same kernel without and with the mechanism
PAIRS = {
    ("online_softmax", "branch keeps the old max"): ('''
        __global__ void k(const float* x, float* y, int n) {
            float maxval = -INFINITY, sum = 0.f;
            for (int j = 0; j < n; j++) if (x[j] > maxval) maxval = x[j];
            for (int j = 0; j < n; j++) sum += expf(x[j] - maxval);
            y[0] = maxval; y[1] = sum;
        }''', '''
        __global__ void k(const float* x, float* y, int n) {
            float maxval = -INFINITY, sum = 0.f;
            for (int j = 0; j < n; j++) {
                if (x[j] > maxval) {
                    float maxval_prev = maxval;
                    maxval = x[j];
                    sum = sum * expf(maxval_prev - maxval) + expf(x[j] - maxval);
                } else {
                    sum += expf(x[j] - maxval);
                }
            }
            y[0] = maxval; y[1] = sum;
        }'''),
    ("online_softmax", "max raised before the rescale"): ('''
        __global__ void k(const float* s, const float* v, float* o, int n) {
            float m = -1e30f, l = 0.f, acc = 0.f;
            for (int t = 0; t < n; ++t) if (s[t] > m) m = s[t];
            for (int t = 0; t < n; ++t) { float p = __expf(s[t] - m); l += p; acc += p * v[t]; }
            o[0] = acc / l;
        }''', '''
        __global__ void k(const float* s, const float* v, float* o, int n) {
            float m = -1e30f, l = 0.f, acc = 0.f;
            for (int t = 0; t < n; ++t) {
                const float old_max = m;
                if (s[t] > m) m = s[t];
                const float correction = __expf(old_max - m);
                const float p = __expf(s[t] - m);
                l = l * correction + p;
                acc = acc * correction + p * v[t];
            }
            o[0] = acc / l;
        }'''),
    ("online_softmax", "new max inline in the rescale"): ('''
        __global__ void k(const float* x, float* lse, int n) {
            float m = -INFINITY, s = 0.f;
            for (int c = 0; c < n; ++c) m = fmaxf(m, x[c]);
            for (int c = 0; c < n; ++c) s += expf(x[c] - m);
            lse[0] = m + logf(s);
        }''', '''
        __global__ void k(const float* x, float* lse, int n) {
            float m = -INFINITY, s = 0.f;
            for (int c = 0; c < n; ++c) {
                float v = x[c];
                s = s * expf(m - fmaxf(m, v)) + expf(v - fmaxf(m, v));
                m = fmaxf(m, v);
            }
            lse[0] = m + logf(s);
        }'''),
    ("online_softmax", "merge operator on pairs"): ('''
        struct MD { float m; float d; };
        __device__ MD md_add(MD a, MD b) { MD r; r.m = fmaxf(a.m, b.m); r.d = a.d + b.d; return r; }
        __global__ void k(const float* x, float* y, int n) {
            MD md = {-1e30f, 0.f};
            for (int i = threadIdx.x; i < n; i += blockDim.x) { MD e = {x[i], 1.f}; md = md_add(md, e); }
            y[threadIdx.x] = md.m + md.d;
        }''', '''
        struct MD { float m; float d; };
        __device__ MD md_merge(MD a, MD b) {
            bool a_bigger = a.m > b.m;
            MD big = a_bigger ? a : b;
            MD small = a_bigger ? b : a;
            MD r;
            r.d = big.d + small.d * __expf(small.m - big.m);
            r.m = big.m;
            return r;
        }
        __global__ void k(const float* x, float* y, int n) {
            MD md = {-1e30f, 0.f};
            for (int i = threadIdx.x; i < n; i += blockDim.x) { MD e = {x[i], 1.f}; md = md_merge(md, e); }
            y[threadIdx.x] = md.m + md.d;
        }'''),
    ("coarsening", "columns a block-width apart"): ('''
        __global__ void k(const float* x, float* y, int cols) {
            const float* xr = x + (size_t)blockIdx.x * cols;
            float s = 0.f;
            for (int c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
            y[blockIdx.x * blockDim.x + threadIdx.x] = s;
        }''', '''
        __global__ void k(const float* x, float* y, int cols) {
            const float* xr = x + (size_t)blockIdx.x * cols;
            float s = 0.f;
            for (int base = threadIdx.x; base < cols; base += 4 * blockDim.x) {
                for (int k = 0; k < 4; ++k) {
                    int c = base + k * blockDim.x;
                    if (c < cols) s += __ldg(xr + c);
                }
            }
            y[blockIdx.x * blockDim.x + threadIdx.x] = s;
        }'''),
    ("coarsening", "rows of a block"): ('''
        __global__ void k(float* out, const float* inp, const float* bias, int rows, int cols) {
            const int row = blockIdx.x;
            for (int c = threadIdx.x; c < cols; c += blockDim.x)
                out[(size_t)row * cols + c] = inp[(size_t)row * cols + c] + bias[c];
        }''', '''
        __global__ void k(float* out, const float* inp, const float* bias, int rows, int cols) {
            for (int r = 0; r < 4; ++r) {
                const int row = blockIdx.x * 4 + r;
                if (row >= rows) return;
                for (int c = threadIdx.x; c < cols; c += blockDim.x)
                    out[(size_t)row * cols + c] = inp[(size_t)row * cols + c] + bias[c];
            }
        }'''),
    ("coarsening", "a column of results"): ('''
        template <int BM, int BN>
        __global__ void k(int N, const float* A, float* C) {
            const int row = threadIdx.x / BN, col = threadIdx.x % BN;
            C[(blockIdx.y * BM + row) * N + col] = A[row];
        }
        template __global__ void k<64, 64>(int, const float*, float*);''', '''
        template <int BM, int BN, int TM>
        __global__ void k(int N, const float* A, float* C) {
            const int threadRow = threadIdx.x / BN, threadCol = threadIdx.x % BN;
            float threadResults[TM] = {0.f};
            for (int resIdx = 0; resIdx < TM; ++resIdx) threadResults[resIdx] += A[threadRow * TM + resIdx];
            for (int resIdx = 0; resIdx < TM; ++resIdx)
                C[(threadRow * TM + resIdx) * N + threadCol] = threadResults[resIdx];
        }
        template __global__ void k<64, 64, 8>(int, const float*, float*);'''),
    ("smem_padding", "pitch a named constant"): ('''
        constexpr int TILE_DIM = 32;
        __global__ void k(float* o, const float* i, int w) {
            __shared__ float tile[TILE_DIM][TILE_DIM];
            tile[threadIdx.y][threadIdx.x] = i[(blockIdx.y * TILE_DIM + threadIdx.y) * w + threadIdx.x];
            __syncthreads();
            o[(blockIdx.x * TILE_DIM + threadIdx.y) * w + threadIdx.x] = tile[threadIdx.x][threadIdx.y];
        }''', '''
        constexpr int TILE_DIM = 32;
        constexpr int TILE_PITCH = TILE_DIM + 1;
        __global__ void k(float* o, const float* i, int w) {
            __shared__ float tile[TILE_DIM][TILE_PITCH];
            tile[threadIdx.y][threadIdx.x] = i[(blockIdx.y * TILE_DIM + threadIdx.y) * w + threadIdx.x];
            __syncthreads();
            o[(blockIdx.x * TILE_DIM + threadIdx.y) * w + threadIdx.x] = tile[threadIdx.x][threadIdx.y];
        }'''),
    ("smem_padding", "leading dimension macro"): ('''
        #define BM 64
        #define BK 8
        #define LDS_A BM
        __global__ void k(const float* a, float* out, int K) {
            __shared__ float As[BK * LDS_A];
            for (int kk = 0; kk < BK; ++kk) As[kk * LDS_A + threadIdx.x] = a[threadIdx.x * K + kk];
            __syncthreads();
            out[threadIdx.x] = As[(threadIdx.x % BK) * LDS_A + threadIdx.x / BK];
        }''', '''
        #define BM 64
        #define BK 8
        #define LDS_A (BM + 4)
        __global__ void k(const float* a, float* out, int K) {
            __shared__ float As[BK * LDS_A];
            for (int kk = 0; kk < BK; ++kk) As[kk * LDS_A + threadIdx.x] = a[threadIdx.x * K + kk];
            __syncthreads();
            out[threadIdx.x] = As[(threadIdx.x % BK) * LDS_A + threadIdx.x / BK];
        }'''),
    ("smem_padding", "stride worth one more than the tile"): ('''
        #define SMEM_STRIDE 32
        __global__ void k(const float* s, float* d) {
            __shared__ float buf[32][SMEM_STRIDE];
            buf[threadIdx.y][threadIdx.x] = s[threadIdx.y * 32 + threadIdx.x];
            __syncthreads();
            d[threadIdx.y * 32 + threadIdx.x] = buf[threadIdx.x][threadIdx.y];
        }''', '''
        #define SMEM_STRIDE 33
        __global__ void k(const float* s, float* d) {
            __shared__ float buf[32][SMEM_STRIDE];
            buf[threadIdx.y][threadIdx.x] = s[threadIdx.y * 32 + threadIdx.x];
            __syncthreads();
            d[threadIdx.y * 32 + threadIdx.x] = buf[threadIdx.x][threadIdx.y];
        }'''),
    ("register_tiling", "outer product in a pointer helper"): ('''
        template <int TM>
        __device__ void axpy(const float* a, float b, float* acc) {
            for (int i = 0; i < TM; ++i) acc[i] += a[i] * b;
        }
        __global__ void k(const float* A, const float* B, float* C, int K) {
            float acc[4] = {0.f};
            float a[4];
            for (int kk = 0; kk < K; ++kk) {
                for (int i = 0; i < 4; ++i) a[i] = A[kk * 64 + threadIdx.x * 4 + i];
                axpy<4>(a, B[kk], acc);
            }
            for (int i = 0; i < 4; ++i) C[threadIdx.x * 4 + i] = acc[i];
        }''', '''
        template <int TM, int TN>
        __device__ void outer_product(const float* regM, const float* regN, float* acc) {
            for (int i = 0; i < TM; ++i)
                for (int j = 0; j < TN; ++j) acc[i * TN + j] += regM[i] * regN[j];
        }
        __global__ void k(const float* A, const float* B, float* C, int K) {
            float acc[4 * 4] = {0.f};
            float a[4], b[4];
            for (int kk = 0; kk < K; ++kk) {
                for (int i = 0; i < 4; ++i) a[i] = A[kk * 64 + threadIdx.x * 4 + i];
                for (int j = 0; j < 4; ++j) b[j] = B[kk * 64 + threadIdx.y * 4 + j];
                outer_product<4, 4>(a, b, acc);
            }
            for (int i = 0; i < 16; ++i) C[threadIdx.x * 16 + i] = acc[i];
        }'''),
    ("register_tiling", "accumulator struct in a rank-1 helper"): ('''
        struct Accum { float c[4]; };
        __device__ void add(Accum& acc, const float (&a)[4], float b) {
            for (int i = 0; i < 4; ++i) acc.c[i] = fmaf(a[i], b, acc.c[i]);
        }
        __global__ void k(const float* A, const float* B, float* C, int K) {
            Accum acc = {};
            for (int kk = 0; kk < K; ++kk) {
                float a[4];
                for (int i = 0; i < 4; ++i) a[i] = A[kk * 64 + i];
                add(acc, a, B[kk]);
            }
            for (int i = 0; i < 4; ++i) C[threadIdx.x * 4 + i] = acc.c[i];
        }''', '''
        struct Accum { float c[4][4]; };
        __device__ void rank1_update(Accum& acc, const float (&a)[4], const float (&b)[4]) {
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) acc.c[i][j] = fmaf(a[i], b[j], acc.c[i][j]);
        }
        __global__ void k(const float* A, const float* B, float* C, int K) {
            Accum acc = {};
            for (int kk = 0; kk < K; ++kk) {
                float a[4], b[4];
                for (int i = 0; i < 4; ++i) a[i] = A[kk * 64 + i];
                for (int j = 0; j < 4; ++j) b[j] = B[kk * 64 + j];
                rank1_update(acc, a, b);
            }
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) C[(threadIdx.x * 4 + i) * 64 + j] = acc.c[i][j];
        }'''),
    ("multistage_buffer", "offset flipped by xor"): ('''
        #define TILE 256
        __global__ void k(const float* A, const float* x, float* y, int cols) {
            __shared__ float xs[TILE];
            float sum = 0.f;
            for (int t = 0; t < cols; t += TILE) {
                if (t + threadIdx.x < cols) xs[threadIdx.x] = x[t + threadIdx.x];
                __syncthreads();
                for (int j = 0; j < TILE && t + j < cols; ++j) sum += A[blockIdx.x * cols + t + j] * xs[j];
                __syncthreads();
            }
            y[blockIdx.x] = sum;
        }''', '''
        #define TILE 256
        __global__ void k(const float* A, const float* x, float* y, int cols) {
            __shared__ float xs[2 * TILE];
            int off = 0;
            if (threadIdx.x < cols) xs[threadIdx.x] = x[threadIdx.x];
            __syncthreads();
            float sum = 0.f;
            for (int t = 0; t < cols; t += TILE) {
                int nxt = off ^ TILE;
                if (t + TILE + threadIdx.x < cols) xs[nxt + threadIdx.x] = x[t + TILE + threadIdx.x];
                for (int j = 0; j < TILE && t + j < cols; ++j) sum += A[blockIdx.x * cols + t + j] * xs[off + j];
                __syncthreads();
                off = nxt;
            }
            y[blockIdx.x] = sum;
        }'''),
    ("multistage_buffer", "stage pointer into dynamic shared memory"): ('''
        #define TILE 512
        __global__ void k(const float* a, float* out, int K) {
            extern __shared__ float smem[];
            float acc = 0.f;
            for (int k0 = 0; k0 < K; k0 += TILE) {
                for (int i = threadIdx.x; i < TILE; i += blockDim.x) smem[i] = a[k0 + i];
                __syncthreads();
                for (int i = 0; i < TILE; ++i) acc += smem[i];
                __syncthreads();
            }
            out[threadIdx.x] = acc;
        }''', '''
        #define TILE 512
        __global__ void k(const float* a, float* out, int K) {
            extern __shared__ float smem[];
            int stage = 0;
            for (int i = threadIdx.x; i < TILE; i += blockDim.x) smem[i] = a[i];
            __syncthreads();
            float acc = 0.f;
            for (int k0 = 0; k0 < K; k0 += TILE) {
                float* cur = smem + stage * TILE;
                if (k0 + TILE < K) {
                    float* nxt = smem + (stage ^ 1) * TILE;
                    for (int i = threadIdx.x; i < TILE; i += blockDim.x) nxt[i] = a[k0 + TILE + i];
                }
                for (int i = 0; i < TILE; ++i) acc += cur[i];
                __syncthreads();
                stage ^= 1;
            }
            out[threadIdx.x] = acc;
        }'''),
    ("unroll", "steps on the template block size"): ('''
        template <unsigned int blockSize>
        __global__ void k(const float* in, float* out) {
            __shared__ float sdata[blockSize];
            unsigned int tid = threadIdx.x;
            sdata[tid] = in[blockIdx.x * blockSize + tid];
            __syncthreads();
            for (unsigned int s = blockSize / 2; s > 0; s >>= 1) {
                if (tid < s) sdata[tid] += sdata[tid + s];
                __syncthreads();
            }
            if (tid == 0) out[blockIdx.x] = sdata[0];
        }
        template __global__ void k<256>(const float*, float*);''', '''
        template <unsigned int blockSize>
        __global__ void k(const float* in, float* out) {
            __shared__ float sdata[blockSize];
            unsigned int tid = threadIdx.x;
            sdata[tid] = in[blockIdx.x * blockSize + tid];
            __syncthreads();
            if (blockSize >= 512) { if (tid < 256) sdata[tid] += sdata[tid + 256]; __syncthreads(); }
            if (blockSize >= 256) { if (tid < 128) sdata[tid] += sdata[tid + 128]; __syncthreads(); }
            if (blockSize >= 128) { if (tid < 64) sdata[tid] += sdata[tid + 64]; __syncthreads(); }
            for (unsigned int s = 32; s > 0; s >>= 1) {
                if (tid < s) sdata[tid] += sdata[tid + s];
                __syncthreads();
            }
            if (tid == 0) out[blockIdx.x] = sdata[0];
        }
        template __global__ void k<256>(const float*, float*);'''),
    ("unroll", "if constexpr steps in a helper"): ('''
        template <int BLOCK>
        __device__ float block_max(float v, float* red) {
            red[threadIdx.x] = v;
            __syncthreads();
            for (int s = BLOCK / 2; s > 0; s >>= 1) {
                if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
                __syncthreads();
            }
            return red[0];
        }
        __global__ void k(const float* x, float* out) {
            __shared__ float red[256];
            float m = block_max<256>(x[blockIdx.x * 256 + threadIdx.x], red);
            if (threadIdx.x == 0) out[blockIdx.x] = m;
        }''', '''
        template <int BLOCK>
        __device__ float block_max(float v, float* red) {
            const int t = threadIdx.x;
            red[t] = v;
            __syncthreads();
            if constexpr (BLOCK >= 512) { if (t < 256) red[t] = fmaxf(red[t], red[t + 256]); __syncthreads(); }
            if constexpr (BLOCK >= 256) { if (t < 128) red[t] = fmaxf(red[t], red[t + 128]); __syncthreads(); }
            if constexpr (BLOCK >= 128) { if (t < 64) red[t] = fmaxf(red[t], red[t + 64]); __syncthreads(); }
            if constexpr (BLOCK >= 64) { if (t < 32) red[t] = fmaxf(red[t], red[t + 32]); __syncthreads(); }
            for (int s = 16; s > 0; s >>= 1) {
                if (t < s) red[t] = fmaxf(red[t], red[t + s]);
                __syncthreads();
            }
            return red[0];
        }
        __global__ void k(const float* x, float* out) {
            __shared__ float red[256];
            float m = block_max<256>(x[blockIdx.x * 256 + threadIdx.x], red);
            if (threadIdx.x == 0) out[blockIdx.x] = m;
        }'''),
}


@pytest.mark.parametrize("family,name", sorted(PAIRS))
def test_the_form_is_seen_and_the_same_code_without_it_is_not(family, name, compiles):
    before, after = (dedent(s) for s in PAIRS[family, name])
    compiles(before)
    compiles(after)
    assert seen(before, family) == [], f"{family} seen in the code without it ({name})"
    got = seen(after, family)
    assert got, f"{family} not seen ({name})"
    assert all(not f.removable for f in got)  # seen, never proposed for removal: no rewrite takes these forms


def test_a_two_d_register_tile_is_not_coarsening():
    """Loops over a 2-D tile of results index the thread's rows scaled by TM too: register tiling."""
    src = dedent(PAIRS["register_tiling", "outer product in a pointer helper"][1])
    assert seen(src, "register_tiling") and not seen(src, "coarsening")


def test_a_halo_is_not_padding_through_constants():
    src = dedent('''
        #define TILE 16
        #define HALO_W (TILE + 2)
        __global__ void k(const float* in, float* out, int w) {
            __shared__ float s[HALO_W][HALO_W];
            s[threadIdx.y][threadIdx.x] = in[threadIdx.y * w + threadIdx.x];
            __syncthreads();
            out[threadIdx.y * w + threadIdx.x] = s[threadIdx.y + 1][threadIdx.x + 1];
        }''')
    assert seen(src, "smem_padding") == []


def test_a_runtime_size_chain_is_not_unrolling():
    src = dedent('''
        __global__ void k(const float* in, float* out, int n) {
            float v = in[threadIdx.x];
            if (n >= 512) v *= 2.f;
            if (n >= 256) v *= 3.f;
            if (n >= 128) v *= 4.f;
            out[threadIdx.x] = v;
        }''')
    assert seen(src, "unroll") == []
