"""The row-wise rewriter on kernels written as people write them: recognised by what they compute (which
loop reduces, which index walks a row, which integer bounds which loop), in every guard style, name
and layout of apply_workloads/ (sums over one dimension, softmax, log-softmax, LayerNorm, RMSNorm),
including reductions over a strided dimension; refused with the fact that blocked it otherwise. Each
rewrite is compiled with nvcc and audited; the shared forms are run on the CPU with real barriers
(emulate_block.py) against the workload's oracle on its probe shapes."""
from pathlib import Path

import pytest

from klineage.gate.correctness import compare
from klineage.mechanisms.audit import audit_structural
from klineage.mechanisms import NotApplicable, detect_all, registry
from klineage.mechanisms.shapes import forward_states, shape_mechanisms, structural_rewrite
from klineage.mechanisms.shapes import rowwise as R
from klineage.workload import load_workload
from klineage.workload_schema import Tolerance

import emulate_block

ROOT = Path(__file__).resolve().parents[2]
APPLY = ROOT / "apply_workloads"
KNOWN = {m.NAME for m in registry().values() if m.DETECTABLE}
# apply_workloads/<op>_<style>: (operator class, the rows' bound, the reduced extent, the row's step)
STYLES = {
    "sum_rows_wrapped": ("row_reduction", "batch_size", "dim", "1"),
    "sum_dim1_strided": ("strided_reduction", "outer * inner", "reduce", "inner"),
    "sum_columns": ("strided_reduction", "n_cols", "n_rows", "n_cols"),
    "softmax_wrapped": ("row_reduction", "M", "N", "1"),
    "softmax_first_element": ("row_reduction", "rows", "cols", "1"),
    "softmax_batched": ("row_reduction", "seq", "dim", "1"),
    "logsoftmax_wrapped": ("row_reduction", "num_rows", "num_cols", "1"),
    "logsoftmax_flat_rows": ("row_reduction", "B * T", "V", "1"),
    "logsoftmax_half": ("row_reduction", "n_rows", "n_cols", "1"),
    "layernorm_stats": ("row_reduction", "N", "C", "1"),
    "layernorm_local_index": ("row_reduction", "m", "n", "1"),
    "layernorm_block_of_one": ("row_reduction", "batch_size", "hidden", "1"),
    "rmsnorm_wrapped": ("row_reduction", "num_tokens", "hidden_size", "1"),
    "rmsnorm_channels": ("strided_reduction", "batch * spatial", "channels", "spatial"),
    "rmsnorm_bf16": ("row_reduction", "rows", "dim", "1"),
}
STRIDED = sorted(n for n, v in STYLES.items() if v[0] == "strided_reduction")
needs_gxx = pytest.mark.skipif(emulate_block.GXX is None, reason="g++ is needed for the CPU emulation")


def naive(name: str) -> str:
    return (APPLY / name / "naive.cu").read_text()


def audited(before: str, after: str, mech: str) -> dict:
    return audit_structural(detect_all(before), detect_all(after), mech, KNOWN, shape_mechanisms(before),
                            shape_mechanisms(after))


def rewrite(before: str, mech: str, compiles) -> str:
    res = structural_rewrite(mech, before, {})
    assert not isinstance(res, NotApplicable), res.reason
    au = audited(before, res.source, mech)
    assert au["ok"], au["reason"]
    compiles(res.source)
    return res.source


# ---------------------------------------------------------------- recognition by computation

@pytest.mark.parametrize("name", sorted(STYLES))
def test_each_style_is_read_by_what_it_computes(name):
    op, rows, cols, stride = STYLES[name]
    shape = R.RowwiseRewriter().recognise(naive(name), load_workload(APPLY / name))
    assert not isinstance(shape, NotApplicable), shape.reason
    f = shape.facts
    assert (f["operator"], f["rows"], f["cols"], f["stride"]) == (op, rows, cols, stride)
    assert f["granularity"] == "thread" and f["mechanisms"] == []


GUARDS = {
    "return": "if (r >= rows) return;\n    {body}",
    "braced return": "if (r >= rows) {{ return; }}\n    {body}",
    "reversed": "if (rows <= r) return;\n    {body}",
    "negated": "if (!(r < rows)) return;\n    {body}",
    "enclosing": "if (r < rows) {{\n    {body}\n    }}",
    "enclosing reversed": "if (rows > r) {{\n    {body}\n    }}",
}
ROW = ("float s = 0.0f;\n    for (int c = 0; c < cols; ++c) s += x[(long long)r * cols + c];\n    y[r] = s;")


def kernel(guard: str, body: str = ROW, index: str = "int r = blockIdx.x * blockDim.x + threadIdx.x;",
           params: str = "const float* x, float* y, int rows, int cols") -> str:
    return (f"#include <cuda_runtime.h>\n__global__ void k({params}) {{\n    {index}\n    "
            + guard.format(body=body) + "\n}\n"
            f"extern \"C\" cudaError_t entry({params}, cudaStream_t s) {{\n"
            "    k<<<(rows + 255) / 256, 256, 0, s>>>(x, y, rows, cols);\n    return cudaGetLastError();\n}\n")


@pytest.mark.parametrize("style", sorted(GUARDS))
def test_every_guard_style_reads_the_same_row(style, compiles):
    src = kernel(GUARDS[style])
    shape = R.RowwiseRewriter().recognise(src)
    assert not isinstance(shape, NotApplicable), shape.reason
    assert shape.facts["rows"] == "rows" and shape.facts["cols"] == "cols"
    out = rewrite(src, "block_per_row", compiles)
    out = rewrite(out, "warp_reduction", compiles)
    assert "if (kl_t == 0) y[r] = s;" in out


@pytest.mark.parametrize("src, why", [
    (kernel("if (r >= rows || cols <= 0) return;\n    {body}"), "tests more than the row index"),
    (kernel("if (r > rows) return;\n    {body}"), "not followed by a bounds check"),
    (kernel("if (r < rows) {{\n    {body}\n    }}\n    y[0] = 0.0f;"), "statements follow the block"),
    (kernel("{body}"), "not checked against the row count"),
    (kernel("if (r >= rows) return;\n    {body}", params="const float* x, float* y, int rows, int cols, float* n")
     .replace("(rows + 255) / 256, 256, 0, s>>>(x, y, rows, cols)", "1, 1, 0, s>>>(x, y, rows, cols, n)")
     .replace("r >= rows", "r >= (int)n[0]"), "not by integer parameters"),
    (kernel("if (r >= rows) return;\n    {body}",
            body="float s = 0.0f;\n    for (int c = 0; c < cols; ++c) for (int d = 0; d < 2; ++d) s += x[c];\n    y[r] = s;"),
     "holds another loop"),
    (kernel("{body}", index="for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += blockDim.x * gridDim.x) {",
            body=ROW + "\n    }"), "grid-stride loop"),
    (kernel("if (r >= rows) return;\n    {body}", index="int r = blockIdx.x;"), "does not give each block one thread"),
    (kernel("if (r >= rows) return;\n    {body}",
            body="float s = x[0];\n    for (int c = 0; c < cols; ++c) s += x[(long long)r * cols + c];\n    y[r] = s;"),
     "not 0"),
    (kernel("if (r >= rows) return;\n    {body}",
            body="float s = 0.0f;\n    for (int c = 0; c < cols; ++c) { s += x[r * cols + c]; y[r * cols + c] = s; }"),
     "a scan, or a carried value"),
    (kernel("if (r < rows) {{\n    {body}\n    }}",
            body="y[r] = 0.0f;\n    for (int c = 0; c < cols; ++c) y[r] += x[r * cols + c];"),
     "accumulates into memory (`y[r] += x[r * cols + c]`)"),
])
def test_what_blocks_a_kernel_is_named(src, why):
    got = R.RowwiseRewriter().recognise(src)
    assert isinstance(got, NotApplicable) and why in got.reason, getattr(got, "reason", got)


def test_a_block_of_one_thread_per_row_is_a_thread_per_row(compiles):
    src = naive("layernorm_block_of_one")
    out = rewrite(src, "warp_per_row", compiles)
    assert "<<<(batch_size + LAYERNORM_ROW_THREADS / 32 - 1) / (LAYERNORM_ROW_THREADS / 32), LAYERNORM_ROW_THREADS" \
        in out


def test_the_maximum_from_the_first_element_and_in_place_passes(compiles):
    """softmax_first_element: `if (v > m) m = v;` from x[0] (a pass from column 1, combined by fmaxf),
    exponentials written and read back, and an in-place divide: every pass keeps its own columns."""
    out = rewrite(naive("softmax_first_element"), "block_per_row", compiles)
    assert "for (size_t j = kl_t + 1; j < cols; j += kl_n)" in out and "kl_row_max" in out and "fmaxf" in out
    vec = rewrite(out, "vector_access", compiles)
    assert vec.count("reinterpret_cast<const float4*>") >= 1   # the input of the exponentials pass
    assert "out[j] /= denom;" in vec                             # the in-place pass stays element by element


def test_a_two_dimensional_grid_keeps_its_batch_dimension(compiles):
    out = rewrite(naive("softmax_batched"), "block_per_row", compiles)
    assert "dim3 grid(seq, batch);" in out and "dim3 block(SOFTMAX_3D_ROW_THREADS);" in out


@pytest.mark.parametrize("name", ["softmax_wrapped", "logsoftmax_flat_rows"])
def test_online_fusion_reads_index_declarations_and_conditional_maxima(name, compiles):
    """The max and sum passes fuse when each recomputes the element's index before its update
    (`int loc = row * N + i;`, kept in the fused pass) or takes the maximum with `if (v > m) m = v;`."""
    src = naive(name)
    out = rewrite(src, "online_softmax", compiles)
    assert out.count("for (int i = 0;") == src.count("for (int i = 0;") - 1
    again = rewrite(out, "block_per_row", compiles)
    assert R.RowwiseRewriter().recognise(again).facts["mechanisms"] == ["block_per_row", "online_softmax"]
    assert again == rewrite(rewrite(src, "block_per_row", compiles), "online_softmax", compiles)


# ---------------------------------------------------------------- the strided form

@pytest.mark.parametrize("name", STRIDED)
def test_a_strided_row_is_split_across_a_blocks_warps(name, compiles):
    src = naive(name)
    out = rewrite(src, "block_per_row", compiles)
    assert "kl_line" in out and "(long long)blockIdx.x * 32 + threadIdx.x % 32" in out
    assert "+ 31) / 32" in out                              # 32 lines a block
    shape = R.RowwiseRewriter().recognise(out)
    assert shape.facts["granularity"] == "line" and shape.facts["mechanisms"] == ["block_per_row"]
    assert shape_mechanisms(out) == {"block_per_row"}


@pytest.mark.parametrize("mech, why", [
    ("warp_per_row", "a warp sharing it would read 32 far-apart elements"),
    ("vector_access", "no 16-byte vector"),
    ("register_cache", "no 16-byte vector or register unit"),
])
def test_a_strided_row_refuses_what_does_not_fit_it(mech, why):
    got = structural_rewrite(mech, naive("sum_dim1_strided"), {})
    assert isinstance(got, NotApplicable) and why in got.reason, getattr(got, "reason", got)
    split, _ = R.add(naive("sum_dim1_strided"), "block_per_row")
    got = structural_rewrite("warp_reduction", split, {})
    assert isinstance(got, NotApplicable) and "no warp shuffle reaches them" in got.reason


SOFTMAX_CHANNELS = """#include <cuda_runtime.h>
__global__ void softmax_c(const float* x, float* y, int B, int C, int L) {
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p < B * L) {
        int b = p / L, l = p % L;
        float m = -INFINITY;
        for (int c = 0; c < C; ++c) m = fmaxf(m, x[(b * C + c) * L + l]);
        float z = 0.0f;
        for (int c = 0; c < C; ++c) z += expf(x[(b * C + c) * L + l] - m);
        for (int c = 0; c < C; ++c) y[(b * C + c) * L + l] = expf(x[(b * C + c) * L + l] - m) / z;
    }
}
extern "C" cudaError_t softmax_channels(const float* x, float* y, int B, int C, int L, cudaStream_t s) {
    softmax_c<<<(B * L + 127) / 128, 128, 0, s>>>(x, y, B, C, L);
    return cudaGetLastError();
}
"""


def test_a_strided_softmax_fuses_its_passes_in_either_form(compiles):
    a = rewrite(rewrite(SOFTMAX_CHANNELS, "online_softmax", compiles), "block_per_row", compiles)
    b = rewrite(rewrite(SOFTMAX_CHANNELS, "block_per_row", compiles), "online_softmax", compiles)
    assert a == b and shape_mechanisms(a) == {"block_per_row", "online_softmax"}


# ---------------------------------------------------------------- every style's ladder builds

@pytest.mark.parametrize("name", sorted(STYLES))
def test_every_state_of_each_styles_ladder_builds(name, compiles):
    states = forward_states(naive(name), load_workload(APPLY / name))
    assert states, name
    for src, mechs in states:
        compiles(src)
        assert set(mechs) <= shape_mechanisms(src)


# ---------------------------------------------------------------- semantics on the CPU, barriers included

EMULATED = [("sum_dim1_strided", ("block_per_row",)), ("sum_columns", ("block_per_row",)),
            ("rmsnorm_channels", ("block_per_row",)), ("softmax_first_element", ("block_per_row", "vector_access")),
            ("layernorm_stats", ("warp_per_row", "warp_reduction")), ("logsoftmax_half", ("block_per_row", "online_softmax")),
            ("softmax_wrapped", ("online_softmax", "block_per_row", "warp_reduction", "vector_access", "register_cache")),
            ("logsoftmax_flat_rows", ("warp_per_row", "online_softmax", "vector_access"))]


@needs_gxx
@pytest.mark.parametrize("name, chain", EMULATED, ids=["+".join((n,) + c) for n, c in EMULATED])
def test_shared_rows_compute_what_the_thread_per_row_kernel_does(name, chain):
    """The rewritten kernel, its blocks' threads run with real barriers, matches the oracle on every
    probe shape (strided lines past the last one included: they keep the barriers and store nothing)."""
    wl = load_workload(APPLY / name)
    src = naive(name)
    for m in chain:
        src, _ = R.add(src, m)
    exe = emulate_block.build(src, wl)
    tol = Tolerance(**wl.module.TOLERANCE)
    for shape in wl.probe_shapes:
        inputs, outs = emulate_block.run(exe, wl, shape)
        ref = wl.module.reference(inputs, shape)
        for k, r in ref.items():
            got = compare(outs[k], r, tol)
            assert got.ok, (shape, k, got.reason)


@needs_gxx
def test_the_emulation_catches_a_line_that_leaves_before_its_blocks_barrier():
    """Negative control: without the clamp, the lines past the last return before the combine's
    barrier, which the rest of their block waits at."""
    wl = load_workload(APPLY / "sum_dim1_strided")
    src, _ = R.add(naive("sum_dim1_strided"), "block_per_row")
    bad = src.replace("kl_line < (outer * inner) ? kl_line : (outer * inner) - 1", "kl_line")
    assert bad != src
    exe = emulate_block.build(bad, wl)
    with pytest.raises(AssertionError, match="hung"):
        emulate_block.run(exe, wl, {"outer": 3, "reduce": 5, "inner": 33}, timeout_s=20)
