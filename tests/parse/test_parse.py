"""parse/: tree-sitter trees, queries and edits; libclang types through the CUDA prelude."""
from pathlib import Path

import pytest

from klineage.parse import semantics, syntax
from klineage.parse.syntax import Edit, ParseError, SourceTree

ROOT = Path(__file__).resolve().parents[2]

VECTORS = r'''
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__global__ void __launch_bounds__(256, 2)
k(const float4* __restrict__ a, __nv_bfloat162* b, const half2* c, int n) {
    __shared__ float tile[32][33];
    __shared__ __nv_bfloat162 pairs[64];
    const float4* v = reinterpret_cast<const float4*>(a);
    half2 h = c[threadIdx.x];
    __nv_bfloat162 p = b[threadIdx.x];
    float4 q = __ldg(v + threadIdx.x);
    float e = __expf(q.x);
    pairs[threadIdx.x & 63] = p;
    tile[threadIdx.y][threadIdx.x] = e + __low2float(h);
}
'''


def test_libclang_types_of_vector_and_reduced_precision_types():
    sem = semantics.analyze(VECTORS)
    assert sem.errors == []
    fn = sem.function("k")
    assert fn.space == "global"
    params = {p.name: p for p in fn.params}
    assert params["a"].pointee == "const float4" and params["a"].restrict
    assert params["b"].pointee == "__nv_bfloat162" and not params["b"].restrict
    assert params["c"].pointee == "const half2"  # the typedef as written ...
    assert semantics.vector_name(params["c"].type) == "__half2"  # ... and the vector it names
    types = {name: t for (name, _), t in sem.var_types.items()}
    assert types["h"] == "half2" and types["p"] == "__nv_bfloat162" and types["q"] == "float4"
    shared = {s.name: s for s in sem.shared}
    assert shared["tile"].size_bytes == 32 * 33 * 4
    assert shared["pairs"].size_bytes == 64 * 4  # __nv_bfloat162 is 4 bytes
    assert sem.shared_bytes("k") == 32 * 33 * 4 + 256
    assert [c.vector for c in sem.vector_casts] == ["float4"]
    assert {"__ldg", "__expf", "__low2float"} <= {n for n, _ in sem.calls}
    assert semantics.VECTOR_TYPES["__nv_bfloat162"][2] == 4 and semantics.VECTOR_TYPES["float4"][2] == 16


def test_libclang_reads_real_expert_kernels():
    for path in ("expert_kernels/row_sum/expert.cu", "expert_kernels/swiglu/expert.cu"):
        sem = semantics.analyze((ROOT / path).read_text())
        assert sem.errors == [], sem.errors
        assert len(sem.kernels()) == 2


def test_preprocessor_dead_branches_are_not_live():
    src = "#define MODE 0\n__device__ float f(const float* p) {\n#if MODE == 1\n    return __ldcs(p);\n#else\n    return __ldg(p);\n#endif\n}\n"
    sem = semantics.analyze(src)
    assert not sem.is_live(4) and sem.is_live(6)


def test_tree_sitter_tolerates_hopper_attributes_by_blanking():
    src = "struct __align__(16) S { float a[4]; };\n__global__ void __cluster_dims__(2, 1, 1) k(float* x) { x[0] = 1.f; }\n"
    t = SourceTree(src)
    assert t.error_nodes() == []
    assert [syntax.function_name(f) for f in syntax.functions(t)] == ["k"]
    assert t.text == src  # offsets refer to the original text


def test_queries_are_package_data_and_edits_apply_by_byte_range():
    t = SourceTree(VECTORS)
    callees = [n.text.decode() for n in t.captures("calls", "callee")]
    assert callees[:2] == ["reinterpret_cast", "__ldg"] or "__ldg" in callees
    ldg = next(n for n in t.captures("calls", "call") if n.text.startswith(b"__ldg"))
    new = t.edit([Edit(ldg.start_byte, ldg.end_byte, "*(v + threadIdx.x)")])
    assert "float4 q = *(v + threadIdx.x);" in new
    assert SourceTree(new).error_nodes() == []
    with pytest.raises(ParseError):
        syntax.apply_edits("abcdef", [Edit(0, 3, "x"), Edit(2, 4, "y")])
    with pytest.raises(ParseError, match="no query file"):
        syntax.load_query("no_such_query")
