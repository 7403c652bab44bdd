"""The audit judges on both kinds of evidence: a bundled step is seen as bundled, a mechanism in an
unfamiliar idiom is still seen, a rewrite that changes the generated code elsewhere is caught (and
one that changes only what it rewrote is not), and without PTX it says so."""
import textwrap
from pathlib import Path

import pytest

from klineage.mechanisms.audit import audit_rederived, audit_rules, audit_version
from klineage.mechanisms import Features, detect_all, registry
from klineage.mechanisms.base import Kernel

pytestmark = pytest.mark.nvcc
KNOWN = {m.NAME for m in registry().values() if m.DETECTABLE}
GALLERY = Path(__file__).resolve().parents[2] / "style_gallery" / "kernels"


def dedent(s: str) -> str:
    return textwrap.dedent(s).lstrip("\n")

PLAIN = dedent('''
    __global__ void rowsum(const float* x, float* out, int cols) {
        float v = 0.f;
        for (int c = threadIdx.x; c < cols; c += 32) v += x[(size_t)blockIdx.x * cols + c];
        __shared__ float part[32];
        part[threadIdx.x] = v;
        __syncwarp();
        if (threadIdx.x == 0) { float s = 0.f; for (int i = 0; i < 32; ++i) s += part[i]; out[blockIdx.x] = s; }
    }
''')
# the same row sum with a warp reduction the source detectors do not know (a while loop over a macro)
WHILE_MACRO = dedent('''
    #define XOR_STEP(v, m) ((v) + __shfl_xor_sync(0xffffffffu, (v), (m)))
    __global__ void rowsum(const float* x, float* out, int cols) {
        float v = 0.f;
        for (int c = threadIdx.x; c < cols; c += 32) v += x[(size_t)blockIdx.x * cols + c];
        int m = 16;
        while (m) { v = XOR_STEP(v, m); m >>= 1; }
        if (threadIdx.x == 0) out[blockIdx.x] = v;
    }
''')
# ... and with a fast-math exponential as well: two mechanisms in one rung
WHILE_MACRO_EXP = WHILE_MACRO.replace("out[blockIdx.x] = v;", "out[blockIdx.x] = __expf(v);")


def test_a_mechanism_in_an_unfamiliar_idiom_is_still_seen():
    rich, simple = detect_all(WHILE_MACRO), detect_all(PLAIN)
    assert "warp_reduction" not in {f.mechanism for f in rich}  # the source detectors miss it
    alone = audit_version(list(rich), list(simple), "warp_reduction", KNOWN)  # lists without their source
    assert not alone["ok"] and "adds nothing" in alone["reason"] and "compiler" not in alone
    a = audit_version(rich, simple, "warp_reduction", KNOWN)
    assert a["ok"] and a["added_forward"] == ["warp_reduction"]
    assert a["compiler"] == {"added": ["warp_reduction"]}  # the record says what decided it


def test_a_bundled_step_is_seen_as_bundled():
    a = audit_version(detect_all(WHILE_MACRO_EXP), detect_all(PLAIN), "fast_math", KNOWN)
    assert not a["ok"] and a["added_forward"] == ["fast_math", "warp_reduction"]
    assert "only fast_math added" in a["reason"] and a["compiler"] == {"added": ["warp_reduction"]}


HELPER = dedent('''
    __device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
    __global__ void k(const float* __restrict__ a, float* __restrict__ y, int n) {
        int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
        float4 v = load4(a + i);
        y[i] = __ldg(a + i + 1) + v.x + v.y + v.z + v.w;
    }
''')


def test_a_rewrite_that_changes_code_elsewhere_is_caught():
    rich = detect_all(HELPER)
    ok = detect_all(HELPER.replace("__ldg(a + i + 1)", "*(a + i + 1)"))
    assert audit_rules(rich, ok, "cache_hint", "k:__ldg:a + i + 1")["ok"]
    # the same "removal" of the hint, but the kernel now reads the four floats one by one: the helper's
    # float4 access is still in the source, and no longer in the generated code
    elsewhere = HELPER.replace("__ldg(a + i + 1)", "*(a + i + 1)").replace(
        "float4 v = load4(a + i);", "float4 v = make_float4(a[i], a[i + 1], a[i + 2], a[i + 3]); (void)load4;")
    a = audit_rules(rich, detect_all(elsewhere), "cache_hint", "k:__ldg:a + i + 1")
    assert not a["ok"] and a["compiler"] == {"removed": [["vector_access", "k"]]}
    assert "generated code" in a["reason"]


def test_code_that_changes_where_the_rewrite_acted_is_the_step():
    src = (GALLERY / "sgemm_regtile_4x4.cu").read_text()
    rich = detect_all(src)
    loop = next(f for f in rich if f.mechanism == "unroll" and "i < 4; i++" in f.locus)
    res = registry()["unroll"].deoptimize(Kernel(src), loop)
    assert res.ok
    assert audit_rules(rich, detect_all(res.source), "unroll", loop.locus)["ok"]


def test_rederivation_must_compile_to_the_same_mechanisms():
    rich = detect_all(HELPER)
    assert audit_rederived(rich, detect_all(HELPER + "\n// re-derived\n"))["ok"]
    devectorized = HELPER.replace("return *reinterpret_cast<const float4*>(p);",
                                  "return make_float4(p[0], p[1], p[2], p[3]);")
    r = audit_rederived(rich, detect_all(devectorized))
    assert not r["ok"]  # the source detectors already see the float4 load gone
    assert r["missing"] == [["vector_access", "load4:load:reinterpret_cast<const float4*>(p)"]]


def test_without_ptx_the_audit_is_the_source_detectors_and_says_so():
    broken = Features(detect_all(PLAIN), PLAIN + "\n#error not a kernel\n")
    a = audit_rules(detect_all(PLAIN), broken, "x", "y")
    assert not a["ok"] and "compiler_unavailable" not in a  # a failing source audit needs no compiler
    same = audit_version(detect_all(PLAIN), broken, "warp_per_row", KNOWN)
    assert same["ok"] and same["compiler_unavailable"].startswith("no PTX")
    assert audit_rules(list(detect_all(PLAIN)), [], "x", "y")["ok"] is False
