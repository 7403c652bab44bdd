"""The matmul recogniser reads a plain product by what it computes (klineage.mechanisms.shapes.matmul.read
over klineage.parse.loopnest): on every naive product of apply_workloads/ (square with one size, rectangular,
batched under any name, transposed operands; bodies inside a bounds check or after an early return, a
flat index, a loop over the batch, a host helper between the entry and the launch) the operands, sizes,
batch and layouts it reads are the workload's; names only as they reach the launch (a kernel whose own
names lie reads the same); and a kernel that is not a plain product is refused with the fact that
blocked it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from klineage.mechanisms import NotApplicable
from klineage.mechanisms.base import Applied
from klineage.mechanisms.shapes import structural_rewrite
from klineage.mechanisms.shapes.matmul import forms as mm_forms
from klineage.mechanisms.shapes.matmul import plan as mm_plan
from klineage.parse import loopnest
from klineage.parse.syntax import SourceTree, functions
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[3]
APPLY = ROOT / "apply_workloads"
PRODUCTS = sorted(p.parent for p in APPLY.glob("*/workload.py")
                  if "mmops" in p.read_text() and (p.parent / "naive.cu").is_file())
RECT = APPLY / "matmul_rect_mkn"


def _plan(src: str, wl=None):
    got = mm_plan.recognise_plan(src, wl)
    assert not isinstance(got, NotApplicable), got.reason
    return got


def test_the_set_has_three_styles_of_each_product():
    names = [p.name for p in PRODUCTS]
    for prefix in ("matmul_square_", "matmul_rect_", "bmm_"):
        assert sum(n.startswith(prefix) for n in names) >= 3, names
    transposed = [p for p in PRODUCTS if load_workload(p).module.__dict__.get("A_LAYOUT", "MK") == "KM"
                  or load_workload(p).module.__dict__.get("B_LAYOUT", "KN") == "NK"]
    assert len(transposed) >= 3


@pytest.mark.parametrize("folder", PRODUCTS, ids=lambda p: p.name)
def test_each_naive_product_reads_as_its_workload_states(folder):
    wl = load_workload(folder)
    mod = wl.module
    plan = _plan((folder / "naive.cu").read_text(), wl)
    (e,) = plan.entries
    assert e.name == wl.entry
    assert (e.a, e.b, e.out) == (mod.ROLES["a"], mod.ROLES["b"], mod.ROLES["out"])
    assert (e.M, e.N, e.K) == (mod.SIZES["M"], mod.SIZES["N"], mod.SIZES["K"])
    assert e.batch == mod.SIZES.get("batch") and e.kind == ("bmm" if e.batch else "mm")
    assert plan.a_mmajor == (getattr(mod, "A_LAYOUT", "MK") == "KM")
    assert plan.b_kmajor == (getattr(mod, "B_LAYOUT", "KN") == "NK")
    assert plan.dtype == "f32" and plan.form.core == "naive"
    # and without the workload: the kernel's indexing alone says the same
    again = _plan((folder / "naive.cu").read_text())
    assert again.entries == plan.entries and (again.a_mmajor, again.b_kmajor) == (plan.a_mmajor, plan.b_kmajor)


def test_the_kernels_own_names_are_not_read():
    """The rectangular kernel with its parameters named to mislead (a and b, M and N swapped in the kernel,
    K called `batch`): the launch passes (A, B, C, M, N, K) as before, and the product reads the same."""
    src = (RECT / "naive.cu").read_text()
    lying = (src.replace("gemm_naive(const float* A, const float* B, float* C, int M, int N, int K)",
                         "gemm_naive(const float* B, const float* A, float* C, int N, int M, int batch)")
             .replace("if (row >= M || col >= N) return;", "if (row >= N || col >= M) return;")
             .replace("for (int k = 0; k < K; ++k)", "for (int k = 0; k < batch; ++k)")
             .replace("A[(long long)row * K + k] * B[(long long)k * N + col]",
                      "B[(long long)row * batch + k] * A[(long long)k * M + col]")
             .replace("C[(long long)row * N + col] = acc;", "C[(long long)row * M + col] = acc;"))
    assert lying.count("batch") == 3
    assert _plan(lying).entries == _plan(src).entries


def test_a_bf16_kernel_with_an_optional_bias_reads_by_its_computation():
    """The test kernel of three entry points (mm, addmm with a bias the kernel adds when it is not null,
    bmm over the grid's z), bf16 through conversions: read by what the kernel computes."""
    src = (Path(__file__).parent / "kernels" / "naive_mm.cu").read_text()
    got = mm_plan.computed_entries(src)
    assert isinstance(got, tuple), got
    entries, a_mmajor, b_kmajor, dtype = got
    assert [(e.name, e.kind, e.bias, e.batch) for e in entries] == [
        ("mm", "mm", None, None), ("addmm", "addmm", "bias", None), ("bmm", "bmm", None, "batch")]
    assert (a_mmajor, b_kmajor, dtype) == (False, False, "bf16")


def test_sizes_given_by_macros_are_their_values():
    src = (APPLY / "matmul_square_guard" / "naive.cu").read_text()
    fixed = ("#define DIM 512\n" + src.replace("int N)", ")").replace("int N,", ",").replace(", N)", ")")
             .replace("(N + 15)", "(DIM + 15)").replace("N", "DIM").replace("DIMULL", "NULL"))
    fixed = fixed.replace("const float* A, const float* B, float* C, cudaStream_t stream",
                          "const float* A, const float* B, float* C, cudaStream_t stream")
    (e,) = _plan(fixed).entries
    assert (e.M, e.N, e.K) == ("512", "512", "512")


# ---- refused, with the fact that blocked it -------------------------------------------------------------

def _why(src: str, workload=None) -> str:
    got = mm_plan.recognise_plan(src, workload)
    assert isinstance(got, NotApplicable), "read as a product"
    return got.reason


RECT_SRC = (RECT / "naive.cu").read_text()


@pytest.mark.parametrize("edit,fact", [
    # a leading dimension: A's rows are lda apart, not K
    ((("int M, int N, int K)", "int M, int N, int K, int lda)"), ("row * K + k]", "row * lda + k]"),
      ("A, B, C, M, N, K);", "A, B, C, M, N, K, K);")),
     "a `A` is read with strides lda (row) and 1 (k): neither [M, K] nor [K, M] dense"),
    # alpha * a @ b
    ((("acc += A[", "acc += 2.0f * A["),), "is not a product of two elements (it scales the product)"),
    ((("C[(long long)row * N + col] = acc;", "C[(long long)row * N + col] = 0.5f * acc;"),),
     "is not the sum (nor the sum plus a bias)"),
    # accumulating onto the output
    ((("float acc = 0.0f;\n", ""), ("acc += A", "C[(long long)row * N + col] += A"),
      ("    C[(long long)row * N + col] = acc;\n", "")), "accumulates onto what the output held"),
    # no bounds check on the row
    ((("if (row >= M || col >= N) return;", "if (col >= N) return;"),), "nothing bounds the output row `row`"),
    # the accumulator does not start at zero
    ((("float acc = 0.0f;", "float acc = 1.0f;"),), "the accumulator `acc` starts at 1.0f, not 0"),
])
def test_refusals_name_the_fact(edit, fact):
    src = RECT_SRC
    for old, new in edit:
        assert old in src, old
        src = src.replace(old, new)
    assert fact in _why(src)


def test_an_output_stored_column_major_is_the_transposed_product():
    """C stored [N, M] (C[col * M + row]) is C^T = B^T @ A^T: read as that product, the operands swapped
    and both read transposed."""
    src = RECT_SRC.replace("C[(long long)row * N + col] = acc;", "C[(long long)col * M + row] = acc;")
    plan = _plan(src)
    (e,) = plan.entries
    assert (e.a, e.b, e.M, e.N, e.K) == ("B", "A", "N", "M", "K")
    assert plan.a_mmajor and plan.b_kmajor


def test_a_batch_sharing_b_is_refused_as_such():
    src = (APPLY / "bmm_gridz_batchsize" / "naive.cu").read_text().replace("B[batch * k * n + e * n + col]",
                                                                            "B[e * n + col]")
    assert "b is shared across the batch" in _why(src)


def test_two_launches_are_not_one_product():
    src = RECT_SRC.replace("    gemm_naive<<<grid, block, 0, stream>>>(A, B, C, M, N, K);\n",
                           "    gemm_naive<<<grid, block, 0, stream>>>(A, B, C, M, N, K);\n"
                           "    gemm_naive<<<grid, block, 0, stream>>>(A, B, C, M, N, K);\n")
    assert "launches 2 kernels" in _why(src)


def test_the_workload_that_contradicts_the_kernel_is_named():
    """The transposed-A kernel with the rectangular workload (A given [M, K]): refused, naming the shape."""
    src = (APPLY / "matmul_tn_a_km" / "naive.cu").read_text().replace("matmul_at_b(", "gemm(")
    why = _why(src, load_workload(RECT))
    assert re.search(r"A is \(\d+, \d+\), not \[\.\., K, M\] row-major", why), why


# ---- the parse layer's reading ------------------------------------------------------------------------------

def test_loopnest_reads_indices_loops_and_conditions():
    src = (APPLY / "bmm_loop_nb" / "naive.cu").read_text()
    tree = SourceTree(src)
    fn = next(f for f in functions(tree) if "bmm_naive" in f.text.decode()[:200])
    r = loopnest.read_function(fn)
    assert set(r.positions) == {"col", "row"}
    assert [(lp.var, str(lp.bound)) for lp in r.loops] == [("b", "nb"), ("k", "K")]
    assert {k: (v[0], str(v[1])) for k, v in r.pointers.items()} == {"xb": ("x", "K*M*b"), "yb": ("y", "K*N*b")}
    store = next(s for s in r.steps if s.kind == "assign" and s.op == "=" and not isinstance(s.target, str)
                 and s.target.type == "subscript_expression")
    assert [(str(c.lhs), str(c.rhs)) for c in store.conds] == [("row", "M"), ("col", "N")]
    arr, idx = r.element(store.target, store.env)
    assert arr == "out" and str(idx) == "M*N*b + N*row + col"


# ---- TF32: the workload's tolerance decides ---------------------------------------------------------------

def _to_mma(folder: Path):
    wl = load_workload(folder)
    src = (folder / "naive.cu").read_text()
    for mech in ("smem_tiling", "register_tiling", "unroll"):
        res = structural_rewrite(mech, src, {}, wl) if mech != "unroll" else None
        if mech == "unroll":
            from klineage.mechanisms import Kernel, registry
            res = registry()["unroll"].reoptimize(Kernel(src), None, None)
        assert isinstance(res, Applied), res.reason
        src = res.source
    return src, wl


def test_tf32_needs_a_tolerance_that_admits_it():
    src, wl = _to_mma(RECT)  # its tolerance is fp32's own (atol 1e-4 of the rms)
    res = structural_rewrite("tensor_core_mma", src, {}, wl)
    assert isinstance(res, NotApplicable)
    assert "atol 0.0001" in res.reason and f"below the {mm_forms.TF32_ATOL:g} TF32 needs" in res.reason
    src2, wl2 = _to_mma(APPLY / "matmul_rect_ijk")  # the benchmark suites' 1e-2
    res = structural_rewrite("tensor_core_mma", src2, {}, wl2)
    assert isinstance(res, Applied), res.reason
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in res.source
    assert "cvt.rna.tf32.f32" in res.source
    # the rewrite declares the precondition the gate's correctness check then decides
    assert res.config["preconditions"] == [{"category": "data_types", "condition": mm_forms.TF32_PRECONDITION}]
    # without a workload nothing refuses it: the gate decides
    assert isinstance(structural_rewrite("tensor_core_mma", src, {}, None), Applied)
