"""The matmul shape rewriter: every structural rewrite on at least three kernels of its shape (the held-out
GEMM start kernels, the gemm ladder's rungs, naive kernels written in other habits: [K, N] and [N, K] b,
bf16 and fp16, bias, batches, groups), each compiled with nvcc for sm_90a without spills or stack frames,
audited to add exactly its mechanism, and keeping the entry points, their signatures and the tuning
constants; and the reasons it gives where a rewrite does not apply."""
import re
from pathlib import Path

import pytest

from klineage.apply.materialize import TUNABLE_RE
from klineage.gate.compile import compile_many
from klineage.mechanisms.audit import audit_version, companions_of
from klineage.mechanisms import Kernel, NotApplicable, detect_all, registry
from klineage.mechanisms.base import Applied
from klineage.mechanisms.shapes import rewriters, structural_rewrite
from klineage.mechanisms.shapes.matmul import MatmulRewriter
from klineage.mechanisms.shapes.matmul import forms as mm_forms
from klineage.mechanisms.shapes.matmul import plan as mm_plan
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).parent / "kernels"
LADDER = ROOT / "expert_kernels/gemm/versions"
GEMM_CARD = {"measured_configuration": [  # the wgmma card's shape: other workloads' kernels, the gemm expert's
    {"kernel": "5d61e3f707f7", "workload": "conv2d", "values": [
        {"name": "CONV_STAGES", "role": "stages", "value": 3}, {"axis": "N", "name": "CONV_BN", "role": "tile",
                                                                "value": 128}]},
    {"kernel": "5ade04dcbcaa", "workload": "gemm", "values": [
        {"name": "GEMM_STAGES", "role": "stages", "value": 4},
        {"axis": "M", "name": "GEMM_BM", "role": "tile", "value": 128},
        {"axis": "N", "name": "GEMM_BN", "role": "tile", "value": 256}, {"axis": "K", "name": "GEMM_BK", "role": "tile",
                                                                         "value": 64}]}]}

# start kernel -> (file, workload folder or None)
STARTS = {
    "heldout_mm": (ROOT / "heldout/kernels/gemm_mm.cu", ROOT / "heldout/mm_4096"),
    "heldout_grouped": (ROOT / "heldout/kernels/gemm_grouped.cu", ROOT / "heldout/grouped_mm_g4"),
    "naive_mm": (HERE / "naive_mm.cu", ROOT / "heldout/bmm_16x2048"),
    "naive_grouped": (HERE / "naive_grouped.cu", ROOT / "heldout/grouped_mm_g8"),
    "linear_f16": (HERE / "naive_linear_f16.cu", None),
    "ladder_naive": (ROOT / "expert_kernels/gemm/naive.cu", None),
    **{f"ladder_{p.stem}": (p, None) for p in sorted(LADDER.glob("*.cu"))},
}
# chains of steps from a start: structural steps through the rewriter, the others ("unroll",
# "launch_bounds") through their rules family's forward rewrite, as the apply loop would interleave them
CHAIN = MatmulRewriter.ladder
CASES = {  # mechanism -> (start, steps applied before it)
    "smem_tiling": [("ladder_naive", ()), ("naive_mm", ()), ("naive_grouped", ()), ("linear_f16", ())],
    "register_tiling": [("ladder_01_smem_tiling", ()), ("naive_mm", CHAIN[:1]), ("naive_grouped", CHAIN[:1]),
                        ("linear_f16", CHAIN[:1])],
    "tensor_core_mma": [("ladder_05_unroll", ()), ("ladder_06_vector_access", ()), ("naive_mm", CHAIN[:3]),
                        ("linear_f16", CHAIN[:3])],
    "smem_swizzle": [("ladder_07_tensor_core_mma", ()), ("naive_mm", CHAIN[:4]), ("naive_grouped", CHAIN[:4])],
    "async_copy": [("ladder_08_smem_swizzle", ()), ("naive_mm", CHAIN[:5]), ("linear_f16", CHAIN[:5])],
    "wgmma": [("heldout_mm", ()), ("heldout_grouped", ()), ("ladder_09_async_copy", ()), ("naive_grouped", CHAIN[:6]),
              ("linear_f16", CHAIN[:6])],
    "tma": [("heldout_mm", ()), ("heldout_mm", ("wgmma",)), ("heldout_grouped", ("wgmma",)), ("ladder_10_wgmma", ()),
            ("naive_mm", CHAIN[:7])],
    "warp_specialization": [("heldout_mm", ("wgmma", "tma")), ("heldout_grouped", ("tma", "wgmma")),
                            ("ladder_11_tma", ()), ("linear_f16", CHAIN[:9])],
}
IDS = [f"{m}:{s}+{'+'.join(steps) or '0'}" for m, cs in CASES.items() for s, steps in cs]


def _workload(start):
    folder = STARTS[start][1]
    return load_workload(folder / "workload.py") if folder else None


def _step(src: str, mechanism: str, workload) -> str:
    if mechanism in MatmulRewriter.mechanisms:
        res = structural_rewrite(mechanism, src, GEMM_CARD, workload)
    else:  # a rules step of the ladder: its family's forward rewrite
        res = registry()[mechanism].reoptimize(Kernel(src), None, None)
    assert isinstance(res, Applied), f"{mechanism}: {res.reason}"
    return res.source


@pytest.fixture(scope="module")
def rewrites(tmp_path_factory):
    """case id -> (source before, the rewrite, compile result); every rewrite compiled in one parallel batch."""
    out = {}
    for mech, cases in CASES.items():
        for start, steps in cases:
            wl = _workload(start)
            src = STARTS[start][0].read_text()
            for s in steps:
                src = _step(src, s, wl)
            out[f"{mech}:{start}+{'+'.join(steps) or '0'}"] = (src, structural_rewrite(mech, src, GEMM_CARD, wl))
    applied = [k for k, (_, r) in out.items() if isinstance(r, Applied)]
    built = compile_many([out[k][1].source for k in applied], jobs=2, cache_dir=tmp_path_factory.mktemp("builds"))
    return {k: (src, res, built[applied.index(k)] if k in applied else None) for k, (src, res) in out.items()}


def test_registered():
    assert "matmul" in [r.name for r in rewriters()]


@pytest.mark.nvcc
@pytest.mark.parametrize("case", IDS)
def test_rewrite_adds_exactly_its_mechanism(rewrites, case):
    mechanism = case.split(":")[0]
    before, res, build = rewrites[case]
    assert isinstance(res, Applied), res.reason
    assert res.mechanism == mechanism and res.locus.endswith(f":{mechanism}")
    known = {m.NAME for m in registry().values() if m.DETECTABLE}
    audit = audit_version(detect_all(res.source), detect_all(before), mechanism, known)
    assert audit["ok"], audit["reason"]
    if mechanism in known:
        assert set(audit["added_forward"]) <= {mechanism} | companions_of(mechanism)
        assert mechanism in audit["added_forward"]
    else:  # smem_tiling: a structural step no detector sees
        assert audit["added_forward"] == []
    # and as the rewriter reads the kernel (facts["mechanisms"], with smem_tiling no detector sees)
    start = case.split(":")[1].split("+")[0]
    rw = next(r for r in rewriters() if r.name == "matmul")
    was = set(rw.recognise(before, _workload(start)).facts["mechanisms"])
    now = set(rw.recognise(res.source, _workload(start)).facts["mechanisms"])
    assert now - was == {mechanism} and not was - now
    # compiled for sm_90a, no spills, no local-memory arrays
    assert build.ok, build.log[-3000:]
    assert not build.spills and all(r.stack_bytes == 0 for r in build.resources), build.resources


@pytest.mark.parametrize("case", IDS)
def test_rewrite_keeps_entry_points_and_tunables(rewrites, case):
    before, res, _ = rewrites[case]
    assert isinstance(res, Applied), res.reason
    old = {m.group(1): re.sub(r"\s+", " ", m.group(2)) for m in mm_plan._ENTRY.finditer(before)}
    new = {m.group(1): re.sub(r"\s+", " ", m.group(2)) for m in mm_plan._ENTRY.finditer(res.source)}
    assert new == old  # the same extern "C" entry points, parameter lists as written
    tun = dict(TUNABLE_RE.findall(res.source))
    assert tun and set(res.config["values"]) == set(tun)
    names_before, _, _ = mm_plan._constants(before)
    names_after, _, _ = mm_plan._constants(res.source)
    for role, name in names_before.items():  # a role the new form keeps keeps its name
        if role in names_after:
            assert names_after[role] == name


@pytest.mark.parametrize("case", [c for c in IDS if c.split(":")[0] != "warp_specialization"])
def test_rewrite_is_recognised_again_at_its_form(rewrites, case):
    mechanism = case.split(":")[0]
    start = case.split(":")[1].split("+")[0]
    _, res, _ = rewrites[case]
    plan = mm_plan.recognise_plan(res.source, _workload(start))
    assert not isinstance(plan, NotApplicable), plan.reason
    assert mm_plan.Form(**res.config["form"]) == plan.form
    # and the next rung of its ladder is open to it, or says why not
    nxt = CHAIN[CHAIN.index(mechanism) + 1] if mechanism in CHAIN[:-1] else None
    if nxt in MatmulRewriter.mechanisms:
        got = mm_forms.target_form(plan, nxt, "sm_90a")
        assert isinstance(got, mm_plan.Form) or "apply" in got.reason


@pytest.mark.parametrize("start", ["naive_mm", "naive_grouped", "ladder_naive", "linear_f16"])
def test_ladder_walks_from_a_naive_kernel_to_the_experts_form(start):
    """The rewriter's ladder, one step at a time as admission walks it (rules steps included), reaches the
    warp-specialized TMA + wgmma form from each naive kernel."""
    rw = next(r for r in rewriters() if r.name == "matmul")
    wl = _workload(start)
    src = STARTS[start][0].read_text()
    for mech in rw.ladder:
        shape = rw.recognise(src, wl)
        assert not isinstance(shape, NotApplicable), shape.reason
        res = rw.rewrite(src, shape, mech, {}, wl)
        assert isinstance(res, Applied), f"{mech}: {res.reason}"
        src = res.source
    assert set(rw.recognise(src, wl).facts["mechanisms"]) == set(MatmulRewriter.mechanisms)


def test_wgmma_takes_the_gemm_cards_configuration(rewrites):
    _, res, _ = rewrites["wgmma:heldout_mm+0"]
    # the held-out kernel's names, the gemm expert's measured values (the conv2d kernel's come second)
    assert res.config["values"] == {"GEMM_BLOCK_M": 128, "GEMM_BLOCK_N": 256, "GEMM_STAGES": 4, "GEMM_GROUP_M": 8}
    assert "#define GEMM_BLOCK_N 256" in res.source
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in res.source


def test_fp16_linear_keeps_its_bias_and_layout(rewrites):
    _, res, _ = rewrites["wgmma:linear_f16+smem_tiling+register_tiling+unroll+tensor_core_mma+smem_swizzle+async_copy"]
    assert "launch_matmul(x, weight, bias, nullptr, y, 1, 0, M, N, K, stream)" in res.source
    assert ".f32.f16.f16" in res.source and "p, 1, 1, 0, 0;" in res.source  # b K-major: not transposed


def test_grouped_rewrite_keeps_its_offsets(rewrites):
    _, res, _ = rewrites["warp_specialization:heldout_grouped+tma+wgmma"]
    assert "launch_matmul(a, b, nullptr, offs, out, 1, groups, M, N, K, stream)" in res.source
    assert "setmaxnreg.dec.sync.aligned.u32 40" in res.source
    assert "depth_b = offs != nullptr ? groups : batch" in res.source


# ---- where a rewrite does not apply, and why ----------------------------------------------------------------

def _na(mechanism, src, config=None, workload=None) -> str:
    res = structural_rewrite(mechanism, src, config or {}, workload)
    assert isinstance(res, NotApplicable)
    return res.reason


def test_not_a_matrix_product():
    assert "not a product's signature" in _na("wgmma", (ROOT / "heldout/kernels/softmax_idiom.cu").read_text())
    assert "no M, N and K" in _na("wgmma", (ROOT / "expert_kernels/conv2d/expert.cu").read_text())
    # a leading dimension the kernel reads x with: not a dense product
    lda = (STARTS["ladder_naive"][0].read_text()
           .replace("int M, int N,\n                                  int K)", "int M, int N, int K, int lda)")
           .replace("x[(long long)row * K + k]", "x[(long long)row * lda + k]")
           .replace("(x, weight, out, M, N, K)", "(x, weight, out, M, N, K, K)"))
    assert "a `x` is read with strides lda (row) and 1 (k)" in _na("smem_tiling", lda)


def test_never_raises():
    assert "no extern" in _na("wgmma", "this is not CUDA {{{")
    assert "no extern" in _na("tma", "")


def test_layout_needs_the_workload_when_no_kernel_indexes_b():
    src = STARTS["heldout_mm"][0].read_text()
    assert "pass the workload" in _na("wgmma", src)
    assert isinstance(structural_rewrite("wgmma", src, {}, _workload("heldout_mm")), Applied)


def test_other_mechanisms_are_not_rewritten_around():
    src = STARTS["ladder_naive"][0].read_text().replace("__bfloat162float(x[(long long)row * K + k])",
                                                        "__bfloat162float(__ldg(&x[(long long)row * K + k]))")
    assert "also carries cache_hint" in _na("smem_tiling", src)


@pytest.mark.parametrize("start,mechanism,config,why", [
    ("heldout_mm", "wgmma", {"arch": "sm_80"}, "needs the arch-specific sm_90a target (this target is sm_80)"),
    ("heldout_mm", "tma", {"arch": "sm_89"}, "the TMA needs sm_90 or newer"),
    ("heldout_mm", "warp_specialization", {}, "apply wgmma and tma first"),
    ("heldout_mm", "async_copy", {}, "already copies its tiles asynchronously"),
    ("heldout_grouped", "tensor_core_mma", {}, "already runs its products on tensor cores"),
    ("ladder_naive", "register_tiling", {}, "apply smem_tiling first"),
    ("ladder_naive", "wgmma", {}, "apply tensor_core_mma first"),
    ("ladder_01_smem_tiling", "smem_tiling", {}, "already stages its operands in shared memory"),
    ("ladder_04_launch_bounds", "tensor_core_mma", {}, "apply unroll first"),
    ("ladder_06_vector_access", "smem_swizzle", {}, "no mma.sync operand tiles"),
    ("ladder_07_tensor_core_mma", "wgmma", {}, "apply smem_swizzle first"),
    ("ladder_08_smem_swizzle", "tma", {}, "apply async_copy first"),
    ("ladder_10_wgmma", "warp_specialization", {}, "apply wgmma and tma first"),
    ("ladder_expert", "warp_specialization", {}, "already warp-specialized"),
])
def test_preconditions(start, mechanism, config, why):
    path = STARTS[start][0] if start in STARTS else ROOT / "expert_kernels/gemm/expert.cu"
    assert why in _na(mechanism, path.read_text(), config, _workload(start) if start in STARTS else None)


def test_fp32_operands_take_tensor_cores_as_tf32_where_the_tolerance_admits_it():
    src = (STARTS["ladder_05_unroll"][0].read_text().replace("__nv_bfloat16", "float")
           .replace("__bfloat162float", "").replace("__float2bfloat16", "").replace("#include <cuda_bf16.h>", ""))
    res = structural_rewrite("tensor_core_mma", src, GEMM_CARD, None)
    assert isinstance(res, Applied), res.reason
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in res.source
    tight = type("W", (), {"tolerance": {"rtol": 1e-5, "atol": 1e-5}})()
    assert "below the 0.003 TF32 needs" in _na("tensor_core_mma", src, GEMM_CARD, tight)


def test_warp_specialization_needs_launch_bounds():
    src = STARTS["linear_f16"][0].read_text()
    for s in CHAIN[:8]:
        src = _step(src, s, None)
    assert "apply launch_bounds first" in _na("warp_specialization", src)


# ---- parameters ---------------------------------------------------------------------------------------------

def test_card_values_prefer_flat_pairs_then_the_gemm_kernel():
    assert mm_forms.card_values(GEMM_CARD) == {"stages": 4, "bm": 128, "bn": 256, "bk": 64}
    # as admission passes a card (klineage.mechanisms.forward.shape_config: its anchor and measured configurations)
    assert mm_forms.card_values({"anchor": "", "measured": GEMM_CARD["measured_configuration"]})["bn"] == 256
    assert mm_forms.card_values({"GEMM_BLOCK_N": 64, **GEMM_CARD})["bn"] == 64
    assert mm_forms.card_values({"carrier": GEMM_CARD})["bn"] == 256
    assert mm_forms.card_values({}) == {}


def test_illegal_card_values_fall_back_with_a_note():
    src = STARTS["heldout_mm"][0].read_text()
    res = structural_rewrite("wgmma", src, {"GEMM_BN": 512, "GEMM_STAGES": 9}, _workload("heldout_mm"))
    assert isinstance(res, Applied)
    vals = res.config["values"]
    assert vals["GEMM_BLOCK_N"] == 128  # the held-out kernel's own value, legal for wgmma
    assert vals["GEMM_STAGES"] <= 6     # shrunk until the ring fits 227 KB
    assert any("bn=512 not used" in n for n in res.config["notes"])
