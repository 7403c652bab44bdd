"""Forward rewrites on one-element-per-thread kernels (klineage/mechanisms/elementwise.py):
vector_access (16-byte vectors per thread, scalar tail, misaligned fallback, grid / VEC) and
coarsening (a per-thread count, all loads before the math, grid / COUNT), on snippets and on the
apply workloads' naive kernels (axpby fp32, gelu bf16, rope bf16).

Every rewritten kernel is built by nvcc for sm_90a (no stack frame: the per-item arrays stay in
registers), audited (the detectors see exactly the one mechanism added, nothing removed), and run
on the CPU against the kernel it came from (tests/mechanisms/emulate.py: host C++ with address and
undefined-behaviour sanitizers, so a wrong tail or a vector access at a misaligned base aborts) on
the workload's probe shapes, misaligned bases and in-place calls, threads in order and reversed:
the outputs must be bit for bit those of the naive kernel.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from klineage.gate.compile import compile_kernel
from klineage.mechanisms.forward import rewrite_for
from klineage.mechanisms import detect_all
from klineage.mechanisms.base import Kernel
from klineage.mechanisms.families.coarsening import Coarsening
from klineage.mechanisms.elementwise_rewrite import vectorize
from klineage.mechanisms.families.restrict import Restrict
from klineage.mechanisms.families.launch_bounds import LaunchBounds
from klineage.mechanisms.families.vector_access import VectorAccess

import emulate
from mechtest import dedent

VA, CO = VectorAccess(), Coarsening()
ROOT = Path(__file__).resolve().parents[2]
APPLY = ROOT / "apply_workloads"
needs_gxx = pytest.mark.skipif(emulate.GXX is None, reason="g++ is needed for the CPU emulation")


def naive(name: str) -> str:
    return (APPLY / name / "naive.cu").read_text()


def keys(src: str) -> set:
    return {f.key for f in detect_all(src)}


def added_only(before: str, after: str, mechanism: str) -> set:
    """The features the rewrite added; fails unless they are all `mechanism` and nothing is removed."""
    b, a = keys(before), keys(after)
    assert b <= a, f"features removed: {sorted(b - a)}"
    new = a - b
    assert new and {m for m, _ in new} == {mechanism}, f"added: {sorted(new)}"
    return new


def built(src: str, flags: tuple[str, ...] = ()):
    res = compile_kernel(src, extra_flags=flags)
    assert res.ok, f"nvcc rejected:\n{res.log[-3000:]}\n--- source ---\n{src}"
    for r in res.resources:  # per-item arrays indexed by constants only: registers, no local memory
        assert r.stack_bytes == 0 and r.spill_store_bytes == 0, (r, src)
    return res


def vec(src: str) -> str:
    r = VA.reoptimize(Kernel(src))
    assert r.ok, r.reason
    return r.source


def coarse(src: str, value: int = 4) -> str:
    r = CO.reoptimize(Kernel(src), None, {"value": value})
    assert r.ok, r.reason
    return r.source


# ---------------------------------------------------------------- the CPU harnesses

_COMMON = r"""
static uint32_t kl_rng = 12345u;
static float kl_rand() { kl_rng = kl_rng * 1664525u + 1013904223u; return (float)((kl_rng >> 8) & 0xffffff) / 4194304.0f - 2.0f; }
static uint64_t kl_hash = 1469598103934665603ull;
static void kl_mix(const void* p, size_t n) {
    const unsigned char* c = (const unsigned char*)p;
    for (size_t i = 0; i < n; ++i) { kl_hash ^= c[i]; kl_hash *= 1099511628211ull; }
}
template <class T> static T* kl_alloc(long long n, int off) {  // exact size: ASan sees one element past the end
    T* b = (T*)std::malloc(sizeof(T) * (size_t)(n + off));
    std::memset((void*)b, 0xff, sizeof(T) * (size_t)(n + off));  // NaN-like fill: an unwritten output shows
    return b + off;
}
"""

HARNESS = {
    "axpby": _COMMON + r"""
int main(int argc, char** argv) {
    long long n = atoll(argv[1]); int off = atoi(argv[2]); int inplace = atoi(argv[3]);
    float* x = kl_alloc<float>(n, off); float* y = kl_alloc<float>(n, off);
    for (long long i = 0; i < n; ++i) { x[i] = kl_rand(); y[i] = kl_rand(); }
    float* out = inplace == 1 ? x : inplace == 2 ? y : kl_alloc<float>(n, off);
    int err = axpby(x, y, out, n, -0.625f, 2.25f, nullptr);
    kl_mix(out, sizeof(float) * n); kl_mix(x, sizeof(float) * n); kl_mix(y, sizeof(float) * n);
    std::printf("%d %016llx\n", err, (unsigned long long)kl_hash);
    return 0;
}
""",
    "gelu": _COMMON + r"""
int main(int argc, char** argv) {
    int rows = atoi(argv[1]), cols = atoi(argv[2]); int off = atoi(argv[3]); int inplace = atoi(argv[4]);
    long long n = (long long)rows * cols;
    __nv_bfloat16* x = kl_alloc<__nv_bfloat16>(n, off);
    for (long long i = 0; i < n; ++i) x[i] = __float2bfloat16(3.0f * kl_rand());
    __nv_bfloat16* out = inplace ? x : kl_alloc<__nv_bfloat16>(n, off);
    int err = gelu(x, out, rows, cols, nullptr);
    kl_mix(out, 2 * n); kl_mix(x, 2 * n);
    std::printf("%d %016llx\n", err, (unsigned long long)kl_hash);
    return 0;
}
""",
    "rope": _COMMON + r"""
int main(int argc, char** argv) {
    int tokens = atoi(argv[1]), heads = atoi(argv[2]), dim = atoi(argv[3]); int off = atoi(argv[4]);
    int inplace = atoi(argv[5]);
    long long n = (long long)tokens * heads * dim, nt = (long long)tokens * (dim / 2);
    __nv_bfloat16* x = kl_alloc<__nv_bfloat16>(n, off);
    float* c = kl_alloc<float>(nt, off); float* s = kl_alloc<float>(nt, off);
    for (long long i = 0; i < n; ++i) x[i] = __float2bfloat16(kl_rand());
    for (long long i = 0; i < nt; ++i) { c[i] = kl_rand(); s[i] = kl_rand(); }
    __nv_bfloat16* out = inplace ? x : kl_alloc<__nv_bfloat16>(n, off);
    int err = rope(x, c, s, out, tokens, heads, dim, nullptr);
    kl_mix(out, 2 * n); kl_mix(x, 2 * n);
    std::printf("%d %016llx\n", err, (unsigned long long)kl_hash);
    return 0;
}
""",
}


def _workload(name: str):
    spec = importlib.util.spec_from_file_location(f"wl_{name}", APPLY / name / "workload.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cases(name: str) -> list[tuple]:
    """argv tuples: every probe shape (with its offset), each also in place, plus small sizes and
    offsets around the vector width. The benchmark shapes are left to the GPU."""
    wl = _workload(name)
    keys_ = {"axpby": ("n",), "gelu": ("rows", "cols"), "rope": ("tokens", "heads", "dim")}[name]
    shapes = [dict(s) for s in wl.PROBE_SHAPES]
    if name == "axpby":
        shapes += [{"n": n, "offset": o} for n in (2, 4, 5, 8, 9, 16, 1025, 4096, 5000) for o in (0, 2, 4)]
    elif name == "gelu":
        shapes += [{"rows": 1, "cols": c, "offset": o} for c in (7, 8, 9, 16, 4095, 4097, 8193) for o in (0, 4, 8)]
    else:
        shapes += [{"tokens": 2, "heads": 3, "dim": 16, "offset": 0}, {"tokens": 5, "heads": 1, "dim": 34, "offset": 2}]
    out = []
    for s in shapes:
        for inplace in ((0, 1, 2) if name == "axpby" else (0, 1)):
            out.append(tuple(s[k] for k in keys_) + (s.get("offset", 0), inplace))
    return out


_REF: dict[tuple, str] = {}


def _elements(args: tuple) -> int:
    n = 1
    for a in args[:-2]:
        n *= a
    return n


def same_as_naive(name: str, rewritten: str, defines: tuple[str, ...] = (), reverse: bool = True):
    """The rewritten kernel computes what the naive kernel computes, bit for bit, on every case
    (the largest probe shapes once, in order, out of place: they only add blocks)."""
    ref = emulate.build(naive(name), HARNESS[name])
    new = emulate.build(rewritten, HARNESS[name], defines)
    for args in cases(name):
        big = _elements(args) > 300_000
        if big and args[-1]:
            continue
        if (name, args) not in _REF:
            _REF[name, args] = emulate.run(ref, *args)
        want = _REF[name, args]
        assert emulate.run(new, *args) == want, (name, args, defines)
        if reverse and not big:
            assert emulate.run(new, *args, reverse=True) == want, (name, args, defines, "reversed")


# ---------------------------------------------------------------- before / after on a snippet

SAXPBY = dedent("""
    #include <cuda_runtime.h>

    #ifndef K_BLOCK
    #define K_BLOCK 256   // threads per block
    #endif

    __global__ void saxpby_kernel(const float* x, const float* y, float* out, long long n, float a, float b) {
        long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= n) return;
        out[i] = a * x[i] + b * y[i];
    }

    extern "C" cudaError_t saxpby(const float* x, const float* y, float* out, long long n, float a, float b,
                                  cudaStream_t stream) {
        long long grid = (n + K_BLOCK - 1) / K_BLOCK;
        saxpby_kernel<<<(unsigned)grid, K_BLOCK, 0, stream>>>(x, y, out, n, a, b);
        return cudaGetLastError();
    }
""")


def test_vector_access_on_a_flat_kernel_before_after():
    r = VA.reoptimize(Kernel(SAXPBY))
    assert r.ok, r.reason
    src = r.source
    # 16-byte loads and a store through float4, a count of 1 (coarsening off), the grid over 4 * count * block
    assert "const float4 x_vec = *reinterpret_cast<const float4*>(x + e);" in src
    assert "const float4 y_vec = *reinterpret_cast<const float4*>(y + e);" in src
    assert "*reinterpret_cast<float4*>(out + e) = make_float4(out_v[c][0], out_v[c][1], out_v[c][2], out_v[c][3]);" in src
    assert "#ifndef K_ITEMS_PER_THREAD\n#define K_ITEMS_PER_THREAD 1 " in src
    assert "long long grid = (n + 4 * K_ITEMS_PER_THREAD * K_BLOCK - 1) / (4 * K_ITEMS_PER_THREAD * K_BLOCK);" in src
    # the alignment fallback and the scalar tail
    assert "const bool aligned = (((unsigned long long)x | (unsigned long long)y | (unsigned long long)out) & 15ull) == 0;" in src
    assert src.count("if (aligned && e + 4 <= n) {") == 2
    assert "for (int k = 0; k < 4 && e + k < n; ++k) {" in src and "out[e + k] = out_v[c][k];" in src
    # the body, once, per lane
    assert src.count("out_v[c][k] = a * x_v[c][k] + b * y_v[c][k];") == 1 and "x[i]" not in src
    assert r.before.strip().startswith("{") and "out[i] = a * x[i] + b * y[i];" in r.before
    assert r.locus == "saxpby_kernel:load:reinterpret_cast<const float4*>(x + e)"
    assert r.config["vector"] == "float4" and r.config["lanes"] == 4 and r.config["pointers"] == ["x", "y", "out"]
    new = added_only(SAXPBY, src, "vector_access")
    assert new == {("vector_access", "saxpby_kernel:load:reinterpret_cast<const float4*>(x + e)"),
                   ("vector_access", "saxpby_kernel:load:reinterpret_cast<const float4*>(y + e)"),
                   ("vector_access", "saxpby_kernel:store:reinterpret_cast<float4*>(out + e)")}
    built(src)
    # what apply's rules backend does with it: the same rewrite, exactly vector_access added
    got = rewrite_for("vector_access", SAXPBY, [], None)
    assert got is not None and got[0] == src


def test_coarsening_on_a_flat_kernel_before_after():
    r = CO.reoptimize(Kernel(SAXPBY))
    assert r.ok, r.reason
    src = r.source
    assert r.locus == "K_ITEMS_PER_THREAD" and r.config["value"] == "4"
    assert "#ifndef K_ITEMS_PER_THREAD\n#define K_ITEMS_PER_THREAD 4 " in src
    assert "long long grid = (n + K_ITEMS_PER_THREAD * K_BLOCK - 1) / (K_ITEMS_PER_THREAD * K_BLOCK);" in src
    # all loads in a first loop over the items, the math and the stores in a second
    loads = src.index("x_v[c] = x[i];")
    assert loads < src.index("y_v[c] = y[i];") < src.index("out_v[c] = a * x_v[c] + b * y_v[c];") < src.index("out[i] = out_v[c];")
    assert src.count("for (int c = 0; c < K_ITEMS_PER_THREAD; ++c) {") == 2
    assert src.count("const long long i = base + (long long)c * blockDim.x;") == 2
    assert added_only(SAXPBY, src, "coarsening") == {("coarsening", "K_ITEMS_PER_THREAD")}
    built(src)
    # and the detector reads it as a count of 4 used as an array extent and a loop bound
    f = next(f for f in CO.detect(Kernel(src)))
    assert f.info()["value"] == 4 and f.info()["uses"] == "extent,loop"


def test_the_two_rewrites_commute_and_each_adds_only_itself():
    v, c = vec(SAXPBY), coarse(SAXPBY)
    vc = coarse(v)            # the count of the vectorized kernel raised from 1 to 4
    cv = vec(c)               # the coarsened kernel read back and vectorized
    assert vc == cv
    added_only(v, vc, "coarsening")
    added_only(c, cv, "vector_access")
    assert "#define K_ITEMS_PER_THREAD 4 " in vc and "(4 * K_ITEMS_PER_THREAD * K_BLOCK)" in vc
    built(vc)
    # nothing left to add
    assert not VA.reoptimize(Kernel(vc)).ok and not CO.reoptimize(Kernel(vc)).ok


# ---------------------------------------------------------------- the apply workloads

def test_the_naive_apply_kernels():
    for name in ("axpby", "gelu"):
        src = naive(name)
        v = vec(src)
        added_only(src, v, "vector_access")
        c = coarse(src)
        added_only(src, c, "coarsening")
        assert coarse(v) == vec(c)
        for s in (v, c, coarse(v)):
            built(s)
    g = vec(naive("gelu"))  # bf16: 8 per uint4, unpacked and packed bit for bit
    assert "const uint4 x_vec = *reinterpret_cast<const uint4*>(x + e);" in g
    assert "x_v[c][1] = __ushort_as_bfloat16((unsigned short)(x_vec.x >> 16));" in g
    assert "*reinterpret_cast<uint4*>(out + e) = make_uint4(" in g
    assert "(n + 8 * GELU_ITEMS_PER_THREAD * GELU_BLOCK - 1) / (8 * GELU_ITEMS_PER_THREAD * GELU_BLOCK)" in g
    # rope indexes x at lo / hi and the tables at t * half + i: no vector rewrite ...
    r = VA.reoptimize(Kernel(naive("rope")))
    assert not r.ok and "x is accessed at [lo], not at the flat index [p]" in r.reason
    # ... but its body declares what it loads, then stores: coarsening keeps those per item
    src = naive("rope")
    r = CO.reoptimize(Kernel(src))
    assert r.ok and r.locus == "ROPE_ITEMS_PER_THREAD" and r.config["form"] == "loads then stores"
    added_only(src, r.source, "coarsening")
    c = r.source
    assert "float x1_c[ROPE_ITEMS_PER_THREAD];" in c and "long long lo_c[ROPE_ITEMS_PER_THREAD];" in c
    assert c.index("x1_c[c_] = __bfloat162float(x[lo_c[c_]]);") < c.index("s_c[c_] = sin_tab[t_c[c_] * half + i_c[c_]];") \
        < c.index("out[lo_c[c_]] = __float2bfloat16(x1_c[c_] * c_c[c_] - x2_c[c_] * s_c[c_]);")
    assert "(pairs + ROPE_ITEMS_PER_THREAD * ROPE_BLOCK - 1) / (ROPE_ITEMS_PER_THREAD * ROPE_BLOCK)" in c
    built(c)
    built(c, ("-DROPE_ITEMS_PER_THREAD=8",))
    assert not VA.reoptimize(Kernel(c)).ok and not CO.reoptimize(Kernel(c)).ok


@pytest.mark.parametrize("name", ["axpby", "gelu"])
def test_rules_rewrites_compose_with_the_other_families(name):
    """Every chain of up to two rules rewrites from the naive kernel (what apply's rules backend
    can reach) adds one mechanism per step, builds, and keeps its arrays in registers."""
    seen = {naive(name): ()}
    frontier = [naive(name)]
    for _ in range(2):
        nxt = []
        for s in frontier:
            for mech in ("restrict", "launch_bounds", "cache_hint", "unroll", "coarsening", "vector_access"):
                got = rewrite_for(mech, s, [], None)
                if got is not None and got[0] not in seen:
                    added_only(s, got[0], mech)
                    seen[got[0]] = seen[s] + (mech,)
                    nxt.append(got[0])
        frontier = nxt
    paths = set(seen.values())
    assert ("vector_access",) in paths and ("coarsening",) in paths
    assert ("restrict", "vector_access") in paths and ("launch_bounds", "vector_access") in paths
    assert ("coarsening", "vector_access") in paths and ("vector_access", "unroll") in paths
    for s, path in seen.items():
        if "vector_access" in path or "coarsening" in path:
            built(s)


@needs_gxx
@pytest.mark.parametrize("name", ["axpby", "gelu"])
def test_rewritten_kernels_compute_what_the_naive_kernel_computes(name):
    src = naive(name)
    block = {"axpby": "AXPBY", "gelu": "GELU"}[name]
    v, c = vec(src), coarse(src)
    same_as_naive(name, v)
    same_as_naive(name, c)
    same_as_naive(name, coarse(v))
    # other counts and block sizes through the tuning constants (what the sweep sets)
    same_as_naive(name, v, (f"{block}_ITEMS_PER_THREAD=3", f"{block}_BLOCK=64"), reverse=False)
    same_as_naive(name, c, (f"{block}_ITEMS_PER_THREAD=7",), reverse=False)
    # after the other rules rewrites too
    r = Restrict().reoptimize(Kernel(src))
    lb = LaunchBounds().reoptimize(Kernel(src))
    assert r.ok and lb.ok
    same_as_naive(name, coarse(vec(r.source)), reverse=False)
    same_as_naive(name, vec(lb.source), reverse=False)


@needs_gxx
def test_coarsened_rope_computes_what_the_naive_kernel_computes():
    c = coarse(naive("rope"))
    same_as_naive("rope", c)
    same_as_naive("rope", c, ("ROPE_ITEMS_PER_THREAD=3", "ROPE_BLOCK=32"), reverse=False)
    lb = LaunchBounds().reoptimize(Kernel(naive("rope")))
    assert lb.ok
    same_as_naive("rope", coarse(lb.source), reverse=False)


@needs_gxx
def test_the_emulation_catches_a_missing_tail_or_alignment_check():
    """The CPU check can fail: without the alignment test a float4 access hits a misaligned base
    (UBSan), without the tail test the last vector reads past the buffer (ASan)."""
    v = vec(naive("axpby"))
    no_align = v.replace("if (aligned && e + 4 <= n)", "if (e + 4 <= n)")
    no_tail = v.replace("if (aligned && e + 4 <= n)", "if (aligned)")
    assert no_align != v and no_tail != v
    for broken, args in ((no_align, (1023, 1, 0)), (no_tail, (1023, 0, 0))):
        exe = emulate.build(broken, HARNESS["axpby"])
        with pytest.raises(AssertionError, match="failed"):
            emulate.run(exe, *args)
    # and a rewrite that computes something else is told apart
    wrong = v.replace("alpha * x_v[c][k]", "alpha * y_v[c][k]")
    assert wrong != v
    with pytest.raises(AssertionError):
        same_as_naive("axpby", wrong, reverse=False)


# ---------------------------------------------------------------- other flat forms

FORMS = {
    # `if (i < n) { ... }`, an int index the body uses, a read-modify-write
    "if_block": ("""
        __global__ void ew(const float* x, float* out, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) {
                float v = x[i] * 0.5f;
                out[i] += v + (float)(i % 7);
            }
        }
    """, "ew<<<(n + 127) / 128, 128, 0, stream>>>(x, out, n);", "const float* x, float* out, int n"),
    # a conditional store (the unwritten lanes keep their value), a local array
    "conditional": ("""
        __global__ void ew(const float* x, float* out, long long n) {
            long long i = threadIdx.x + blockIdx.x * blockDim.x;
            if (n <= i) return;
            float t[2];
            t[0] = x[i];
            t[1] = t[0] * t[0];
            if (t[1] > 1.0f) out[i] = t[1];
        }
    """, "ew<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, out, n);", "const float* x, float* out, long long n"),
    # fp16 in, fp16 out, two statements
    "half": ("""
        __global__ void ew(const __half* x, __half* out, long long n) {
            const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
            if (i >= n) { return; }
            const float v = __half2float(x[i]);
            out[i] = __float2half(v * 3.0f - 1.0f);
        }
    """, "ew<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, out, n);", "const __half* x, __half* out, long long n"),
}


def _form(name: str) -> str:
    kernel, launch, params = FORMS[name]
    return dedent("""
        #include <cuda_runtime.h>
        #include <cuda_fp16.h>
        """) + dedent(kernel) + dedent(f"""

        extern "C" cudaError_t entry({params}, cudaStream_t stream) {{
            {launch}
            return cudaGetLastError();
        }}
    """)


_FORM_HARNESS = {
    "if_block": ("float", "int"), "conditional": ("float", "long long"), "half": ("__half", "long long"),
}


def _form_harness(name: str) -> str:
    t, nt = _FORM_HARNESS[name]
    return _COMMON + f"""
int main(int argc, char** argv) {{
    long long n = atoll(argv[1]); int off = atoi(argv[2]); int inplace = atoi(argv[3]);
    {t}* x = kl_alloc<{t}>(n, off);
    {t}* out = inplace ? x : kl_alloc<{t}>(n, off);
    for (long long i = 0; i < n; ++i) x[i] = ({t})(2.0f * kl_rand());
    if (!inplace) for (long long i = 0; i < n; ++i) out[i] = ({t})kl_rand();
    int err = entry(x, out, ({nt})n, nullptr);
    kl_mix(out, sizeof({t}) * n); kl_mix(x, sizeof({t}) * n);
    std::printf("%d %016llx\\n", err, (unsigned long long)kl_hash);
    return 0;
}}
"""


@pytest.mark.parametrize("form", sorted(FORMS))
def test_other_flat_forms(form):
    src = _form(form)
    v, c = vec(src), coarse(src)
    added_only(src, v, "vector_access")
    added_only(src, c, "coarsening")
    assert coarse(v) == vec(c)
    for s in (v, c, coarse(v)):
        built(s)
    if form == "if_block":  # the body reads its index: each lane gets its own; out is read, so loaded
        assert "const int i = e + k;" in v and "const int i = e;" in c
        assert "out_v[c][k] += v + (float)(i % 7);" in v
        assert "out_v[c][0] = out_vec.x;" in v and "out_v[c][k] = out[e + k];" in v
    if form == "conditional":  # a conditional store: out is loaded so the lanes it skips keep their value
        assert "if (t[1] > 1.0f) out_v[c][k] = t[1];" in v and "out_v[c][k] = out[e + k];" in v
    if form == "half":
        assert "__ushort_as_half((unsigned short)(x_vec.x >> 16))" in v
    if emulate.GXX is None:
        return
    ref = emulate.build(src, _form_harness(form))
    for s, defines in ((v, ()), (c, ()), (coarse(v), ()), (v, ("K_ITEMS_PER_THREAD=3",))):
        exe = emulate.build(s, _form_harness(form), defines)
        for n in (1, 3, 4, 7, 8, 9, 255, 1000, 2049, 5000):
            for off in (0, 1, 8):
                for inplace in (0, 1):
                    want = emulate.run(ref, n, off, inplace)
                    assert emulate.run(exe, n, off, inplace) == want, (form, defines, n, off, inplace)
                    assert emulate.run(exe, n, off, inplace, reverse=True) == want


# ---------------------------------------------------------------- what the rewrites refuse

def _snippet(body: str, launch: str = "k<<<(n + 255) / 256, 256, 0, stream>>>(x, y, out, n, a);",
             params: str = "const float* x, const float* y, float* out, long long n, float a",
             extra: str = "") -> str:
    return dedent("""
        #include <cuda_runtime.h>
        #include <cuda_bf16.h>
        """) + extra + f"""
__global__ void k({params}) {{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
{body}
}}

extern "C" cudaError_t entry({params}, cudaStream_t stream) {{
    {launch}
    return cudaGetLastError();
}}
"""


REFUSED = {
    "an access off the index": (_snippet("    out[i] = x[i + 1] + y[i];"), "x is accessed at [i + 1]"),
    "thread indices in the body": (_snippet("    out[i] = x[i] + threadIdx.x;"), "the body reads threadIdx"),
    "a barrier": (_snippet("    out[i] = x[i];\n    __syncthreads();\n    out[i] += y[i];"), "__syncthreads"),
    "a shuffle": (_snippet("    out[i] = __shfl_xor_sync(0xffffffffu, x[i], 1) + y[i];"), "__shfl_xor_sync"),
    "an atomic": (_snippet("    atomicAdd(out, x[i] + y[i]);"), "atomicAdd"),
    "a read after another pointer's write": (
        _snippet("    out[i] = x[i];\n    out[i] += y[i] * 2.0f;\n    float z = x[i];\n    out[i] += z;"),
        "y[i] is read after out[i] is written"),
    "a parameter written by the body": (_snippet("    a *= 2.0f;\n    out[i] = a * x[i] + y[i];"),
                                        "writes or takes the address of a"),
    "a pointer used whole": (_snippet("    out[i] = x[i] + y[0];"), "y is accessed at [0]"),
    "a pointer passed on": (_snippet("    out[i] = f(x) + y[i];", extra="__device__ float f(const float* p) { return p[0]; }\n"),
                            "uses the pointer x other than as x[i]"),
    "a return in the body": (_snippet("    if (x[i] < 0.f) return;\n    out[i] = x[i] + y[i];"), "return statement"),
    "mixed element sizes": (_snippet("    out[i] = x[i] + __bfloat162float(y[i]);",
                                     params="const float* x, const __nv_bfloat16* y, float* out, long long n, float a"),
                            "elements of different sizes"),
    "an element type without a vector form": (
        _snippet("    out[i] = (char)(x[i] + y[i]);", params="const char* x, const char* y, char* out, long long n, float a"),
        "points to char"),
    "a cache-hinted load": (_snippet("    out[i] = __ldg(x + i) + y[i];"), "the pointer x other than as x[i]"),
    "a grid clamped after the formula": (
        _snippet("    out[i] = x[i] + y[i];", launch="long long g = (n + 255) / 256; if (g > 4096) g = 4096;\n"
                 "    k<<<(unsigned)g, 256, 0, stream>>>(x, y, out, n, a);"), "is not set once from a formula"),
    "a grid over another count": (_snippet("    out[i] = x[i] + y[i];",
                                           launch="k<<<(n + 511) / 512, 256, 0, stream>>>(x, y, out, n, a);"),
                                  "the grid divides by 512, not by the elements one block covers (256)"),
    "a grid of another shape": (_snippet("    out[i] = x[i] + y[i];",
                                         launch="k<<<n / 256 + 1, 256, 0, stream>>>(x, y, out, n, a);"),
                                "is not (N + B - 1) / B"),
    "two launches": (_snippet("    out[i] = x[i] + y[i];",
                              launch="k<<<(n + 255) / 256, 256, 0, stream>>>(x, y, out, n, a);\n"
                                     "    k<<<(n + 255) / 256, 256, 0, stream>>>(x, y, out, n, a);"),
                     "launched 2 times"),
}


# off the flat index, coarsening needs the body to declare what it loads, then store
PHASE_REFUSED = {
    "a store before a load": (_snippet("    float u = x[2 * i];\n    out[2 * i] = u;\n    float w = y[2 * i + 1];\n"
                                       "    out[2 * i + 1] = w;"),
                              "is read after the first store"),
    "a first statement that stores": (_snippet("    out[2 * i] = x[2 * i] + y[i];"), "first statement stores"),
    "a load that is not a declaration": (_snippet("    float v;\n    v = x[2 * i];\n    out[2 * i] = v;"),
                                         "is not a declaration of one scalar with an initialiser"),
}


@pytest.mark.parametrize("case", sorted(PHASE_REFUSED))
def test_coarsening_off_the_flat_index_needs_loads_then_stores(case):
    src, why = PHASE_REFUSED[case]
    r = CO.reoptimize(Kernel(src))
    assert not r.ok and why in r.reason, (case, getattr(r, "reason", None))
    assert not VA.reoptimize(Kernel(src)).ok


VECTOR_ONLY = {"mixed element sizes", "an element type without a vector form"}  # coarsening needs no vectors


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_shapes_the_rewrites_do_not_handle_are_not_applicable(case):
    src, why = REFUSED[case]
    for mech in (VA, CO):
        if mech is CO and case in VECTOR_ONLY:
            got = rewrite_for("coarsening", src, [], None)
            assert got is not None
            built(got[0])
            continue
        r = mech.reoptimize(Kernel(src))
        assert not r.ok and why in r.reason, (case, mech.NAME, getattr(r, "reason", None))
        assert rewrite_for(mech.NAME, src, [], None) is None


def test_a_non_flat_index_and_a_template_are_not_applicable():
    src = SAXPBY.replace("(long long)blockIdx.x * blockDim.x + threadIdx.x", "(long long)blockIdx.x * 256 + threadIdx.x")
    r = VA.reoptimize(Kernel(src))
    assert not r.ok and "is not the flat index" in r.reason
    src = SAXPBY.replace("__global__ void saxpby_kernel", "template <int U>\n__global__ void saxpby_kernel").replace(
        "saxpby_kernel<<<", "saxpby_kernel<1><<<")
    r = CO.reoptimize(Kernel(src))
    assert not r.ok and "saxpby_kernel is a template" in r.reason


def test_the_restoring_paths_are_unchanged():
    """With a locus or a helper configuration to restore (the backward walk's forward re-derivation),
    vector_access still only restores helper calls; coarsening still prefers a count set to 1."""
    r = VA.reoptimize(Kernel(SAXPBY), "saxpby_kernel:load:x + i")
    assert not r.ok and r.reason == "no kl_scalar_* helper call to turn back into a vector access"
    r = VA.reoptimize(Kernel(SAXPBY), None, {"call": "kl_scalar_load_float4(p)", "function": "f", "access": "*p"})
    assert not r.ok and r.reason == "no kl_scalar_* helper call to turn back into a vector access"
    v = vec(SAXPBY)  # the vectorized kernel carries a count set to 1: coarsening raises it, nothing else
    r = CO.reoptimize(Kernel(v))
    assert r.ok and r.locus == "K_ITEMS_PER_THREAD" and r.config == {"name": "K_ITEMS_PER_THREAD", "value": "4",
                                                                    "previous": "1", "form": "#define"}
    assert r.source.replace("#define K_ITEMS_PER_THREAD 4", "#define K_ITEMS_PER_THREAD 1") == v


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "expert_kernels").glob("*/naive.cu")
                                        if p.parent.name != "swiglu"))
def test_corpus_kernels_are_not_flat(path):
    """The corpus's naive kernels other than swiglu's (row-wise, tiled, scans, selections) are left
    alone, so admission roundtrips on held-out workloads find what they found before."""
    src = (ROOT / path).read_text()
    assert not vectorize(Kernel(src)).ok
    assert rewrite_for("vector_access", src, [], None) is None
