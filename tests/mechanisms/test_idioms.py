"""Source detectors on the idioms of code written elsewhere (each snippet built by nvcc): cooperative
groups and hardware warp reductions, shuffle loops with several statements, online softmax as if/else or
a ternary, coarsening as const int / template argument / grid-stride loop, flat padding, a double buffer
as one [2*N] array, shared staging with 2-D tiles and carved dynamic buffers, hand-written PTX and
macros. The forms no rewrite takes are seen (detect_seen) but not removable, and stay out of what a walk
proposes from (detect_all); lookalikes are not seen."""
import pytest

from mechtest import dedent
from klineage.mechanisms import detect_all, detect_seen
from klineage.mechanisms.evidence import evidence


def found(src: str, family: str) -> list:
    return [f for f in detect_seen(src) if f.mechanism == family]


CG_REDUCE = dedent('''
    #include <cooperative_groups.h>
    #include <cooperative_groups/reduce.h>
    namespace cg = cooperative_groups;
    __global__ void k(const float* x, float* out) {
        auto tile = cg::tiled_partition<32>(cg::this_thread_block());
        float v = x[threadIdx.x];
        v = cg::reduce(tile, v, cg::plus<float>());
        for (int o = tile.size() / 2; o > 0; o /= 2) v += tile.shfl_down(v, o);
        unsigned n = __reduce_add_sync(0xffffffffu, (unsigned)(v > 0.f));
        if (tile.thread_rank() == 0) out[blockIdx.x] = v + n;
    }
''')

PAIRS = dedent('''
    __global__ void k(const float* x, float* out) {
        float m = x[threadIdx.x], s = 1.f;
        for (int o = 16; o > 0; o >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffff, m, o);
            float s2 = __shfl_xor_sync(0xffffffff, s, o);
            float mn = fmaxf(m, m2);
            s = s * __expf(m - mn) + s2 * __expf(m2 - mn);
            m = mn;
        }
        out[threadIdx.x] = m + s;
    }
''')

BITONIC = dedent('''
    __global__ void k(float* d) {
        float key = d[threadIdx.x];
        for (int kk = 2; kk <= 32; kk <<= 1)
            for (int j = kk >> 1; j > 0; j >>= 1) {
                float other = __shfl_xor_sync(0xffffffff, key, j);
                key = ((threadIdx.x & kk) == 0) == ((threadIdx.x & j) == 0) ? fminf(key, other) : fmaxf(key, other);
            }
        d[threadIdx.x] = key;
    }
''')


def test_warp_reductions_in_other_forms(compiles):
    for src in (CG_REDUCE, PAIRS, BITONIC):
        compiles(src)
    forms = {f.detail[0][1] if f.detail[0][0] == "form" else "" for f in found(CG_REDUCE, "warp_reduction")}
    assert {f.locus.split(":")[1] for f in found(CG_REDUCE, "warp_reduction")} == {"cg_reduce", "shfl_down", "redux"}
    assert forms and all(not f.removable for f in found(CG_REDUCE, "warp_reduction"))
    (pair,) = found(PAIRS, "warp_reduction")
    assert pair.locus.startswith("k:shfl_xor:") and not pair.removable
    assert [f for f in detect_all(PAIRS) if f.mechanism == "warp_reduction"] == []
    assert found(BITONIC, "warp_reduction") == []  # a compare-exchange, not a reduction


ONLINE = {
    "ifelse": '''
        __global__ void k(const float* x, float* out, int n) {
            float m = -1e30f, s = 0.f;
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                float v = x[i];
                if (v > m) { s = s * __expf(m - v) + 1.f; m = v; } else { s += __expf(v - m); }
            }
            out[threadIdx.x] = m + s;
        }''',
    "ternary": '''
        __global__ void k(const float* x, float* out, int n) {
            float m = -1e30f, s = 0.f;
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                float v = x[i];
                float nm = v > m ? v : m;
                s = s * expf(m - nm) + expf(v - nm);
                m = nm;
            }
            out[threadIdx.x] = m + s;
        }''',
    "two_pass": '''
        __global__ void k(const float* x, float* out, int n) {
            float m = -1e30f, s = 0.f;
            for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, x[i]);
            for (int i = threadIdx.x; i < n; i += blockDim.x) s += expf(x[i] - m);
            out[threadIdx.x] = m + s;
        }''',
}


@pytest.mark.parametrize("form", sorted(ONLINE))
def test_online_softmax_as_written(form, compiles):
    src = dedent(ONLINE[form])
    compiles(src)
    assert bool(found(src, "online_softmax")) is (form != "two_pass")


COARSE = dedent('''
    template <int BLOCK, int ITEMS>
    __global__ void items(const float* x, float* y) {
        float v[ITEMS];
        for (int i = 0; i < ITEMS; ++i) v[i] = x[blockIdx.x * BLOCK * ITEMS + i * BLOCK + threadIdx.x];
        for (int i = 0; i < ITEMS; ++i) y[blockIdx.x * BLOCK * ITEMS + i * BLOCK + threadIdx.x] = 2.f * v[i];
    }
    __global__ void local_count(const float* x, float* y) {
        const int kElemsPerThread = 4;
        __shared__ float TILE_ELEMS_buf[256];
        float r[kElemsPerThread];
        for (int i = 0; i < kElemsPerThread; ++i) r[i] = x[threadIdx.x * kElemsPerThread + i];
        TILE_ELEMS_buf[threadIdx.x] = r[0] + r[1] + r[2] + r[3];
        y[threadIdx.x] = TILE_ELEMS_buf[threadIdx.x];
    }
    __global__ void strided(const float* x, float* y, size_t n) {
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
            y[i] = x[i];
    }
    void launch(const float* x, float* y, cudaStream_t s) { items<256, 4><<<16, 256, 0, s>>>(x, y); }
''')


def test_coarsening_counts_and_grid_stride_loops(compiles):
    compiles(COARSE)
    by = {f.locus: f for f in found(COARSE, "coarsening")}
    assert set(by) == {"items:ITEMS", "local_count:kElemsPerThread", "strided:grid_stride:i"}
    assert dict(by["items:ITEMS"].detail)["value"] == 4 and not by["items:ITEMS"].removable
    assert dict(by["local_count:kElemsPerThread"].detail)["form"] == "const" and by["local_count:kElemsPerThread"].removable
    assert not by["strided:grid_stride:i"].removable


BUFFERS = dedent('''
    #define BK 8
    #define BN 64
    __global__ void k(const float* __restrict__ A, float* __restrict__ C, int K) {
        __shared__ float padded[BK * (BN + 4)];
        __shared__ float halo[BN + 2 * 3];
        __shared__ float stages[2 * BK * BN];
        float acc = 0.f;
        float next = A[threadIdx.x];
        for (int k0 = 0; k0 < K; k0 += BK) {
            const int cur = (k0 / BK) & 1, nxt = cur ^ 1;
            stages[cur * BK * BN + threadIdx.x] = next;
            padded[(threadIdx.x % BK) * (BN + 4) + threadIdx.x / BK] = next;
            halo[threadIdx.x % (BN + 6)] = next;
            __syncthreads();
            if (k0 + BK < K) next = A[k0 + BK + threadIdx.x];
            acc += stages[cur * BK * BN + (threadIdx.x ^ 1)] * padded[threadIdx.x] + halo[threadIdx.x % 7];
            stages[nxt * BK * BN + threadIdx.x] = next;
            __syncthreads();
        }
        C[threadIdx.x] = acc;
    }
''')


def test_flat_padding_and_a_double_buffer_in_one_array(compiles):
    compiles(BUFFERS)
    assert [f.locus for f in found(BUFFERS, "smem_padding")] == ["k:pad:padded"]  # the halo is no padding
    (ms,) = found(BUFFERS, "multistage_buffer")
    assert dict(ms.detail)["stages"] == 2
    scan = BUFFERS.replace("stages[nxt * BK * BN + threadIdx.x] = next;",
                           "stages[nxt * BK * BN + threadIdx.x] = stages[cur * BK * BN + threadIdx.x];")
    assert found(scan, "multistage_buffer") == []  # halves written from each other: a ping-pong, no pipeline


STAGING = dedent('''
    #define T 16
    __global__ void tiles(const float* A, const float* B, float* C, int n) {
        __shared__ float As[T][T];
        __shared__ float Bs[T][T];
        float acc = 0.f;
        for (int k0 = 0; k0 < n; k0 += T) {
            As[threadIdx.y][threadIdx.x] = A[(blockIdx.y * T + threadIdx.y) * n + k0 + threadIdx.x];
            Bs[threadIdx.y][threadIdx.x] = B[(k0 + threadIdx.y) * n + blockIdx.x * T + threadIdx.x];
            __syncthreads();
            for (int k = 0; k < T; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
            __syncthreads();
        }
        C[(blockIdx.y * T + threadIdx.y) * n + blockIdx.x * T + threadIdx.x] = acc;
    }
    __global__ void carved(const float4* x, float* y, int d4) {
        extern __shared__ __align__(16) unsigned char raw[];
        float4* row = reinterpret_cast<float4*>(raw);
        for (int i = threadIdx.x; i < d4; i += blockDim.x) row[i] = x[(size_t)blockIdx.x * d4 + i];
        __syncthreads();
        float4 v = row[(threadIdx.x + 1) % d4];
        y[blockIdx.x * blockDim.x + threadIdx.x] = v.x * v.y + v.z * v.w;
    }
    __global__ void tree(const float* x, float* y) {
        __shared__ float s[256];
        s[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];
        __syncthreads();
        for (int h = 128; h > 0; h >>= 1) { if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h]; __syncthreads(); }
        if (threadIdx.x == 0) y[blockIdx.x] = s[0];
    }
    __global__ void transpose(const float* x, float* y, int n) {
        __shared__ float t[32][33];
        t[threadIdx.y][threadIdx.x] = x[(blockIdx.y * 32 + threadIdx.y) * n + blockIdx.x * 32 + threadIdx.x];
        __syncthreads();
        y[(blockIdx.x * 32 + threadIdx.y) * n + blockIdx.y * 32 + threadIdx.x] = t[threadIdx.x][threadIdx.y];
    }
''')


def test_staging_with_2d_tiles_and_carved_dynamic_buffers(compiles):
    compiles(STAGING)
    loci = sorted(f.locus for f in found(STAGING, "smem_staging"))
    assert loci == ["carved:stage:row", "tiles:stage:As", "tiles:stage:Bs"]  # not the tree, not the transpose
    assert not any(f.removable for f in found(STAGING, "smem_staging"))


ASM_MACROS = dedent('''
    #define FAST_EXP(x) __expf(x)
    #if defined(__CUDA_ARCH__)
    #define LDG(p) __ldg(p)
    #else
    #define LDG(p) (*(p))
    #endif
    #define FOR_UNROLLED(i, n) _Pragma("unroll") for (int i = 0; i < (n); ++i)
    __device__ __forceinline__ float tanh_approx(float x) { float y; asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
    __global__ void k(const float4* __restrict__ a, float* __restrict__ o) {
        float4 v;
        asm volatile("ld.global.cs.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(a + threadIdx.x));
        float s = 0.f;
        FOR_UNROLLED(j, 4) { s += FAST_EXP(v.x * j); }
        o[threadIdx.x] = tanh_approx(s) + LDG(o + 1);
    }
''')


def test_hand_written_ptx_and_macros(compiles):
    compiles(ASM_MACROS)
    fams = {}
    assert {f.mechanism for f in detect_all(ASM_MACROS)} == {"restrict"}  # nothing here for a rewrite to take
    for f in detect_seen(ASM_MACROS):
        fams.setdefault(f.mechanism, []).append(f)
    assert {f.locus for f in fams["cache_hint"]} == {"k:asm:ld.global.cs.v4.f32", "k:LDG:o + 1"}
    assert {f.locus for f in fams["fast_math"]} == {"tanh_approx:asm:tanh.approx", "k:FAST_EXP"}
    assert [f.locus for f in fams["vector_access"]] == ["k:load:asm:ld.global.cs.v4.f32"]
    assert [f.locus for f in fams["unroll"]] == ["k:loop:FOR_UNROLLED(j, 4)"]
    assert not any(f.removable for fs in fams.values() for f in fs if f.mechanism != "restrict")


@pytest.mark.nvcc
def test_a_locus_in_a_device_helper_says_so():
    src = dedent('''
        __device__ __forceinline__ float warp_sum(float v) {
            for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
            return v;
        }
        __global__ void k1(const float* x, float* y) { y[blockIdx.x] = warp_sum(x[threadIdx.x]); }
        __global__ void k2(const float* x, float* y) { y[blockIdx.x] = warp_sum(2.f * x[threadIdx.x]); }
    ''')
    (f,) = [f for f in evidence(src).found if f.feature.mechanism == "warp_reduction"]
    assert f.by == "both" and f.helper == "warp_sum" and f.inlined_into == ("k1", "k2")
    assert f.to_dict()["helper"] == "warp_sum"
