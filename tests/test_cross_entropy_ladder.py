"""The hand-made version ladders of the two cross-entropy workloads (fp32 logits `cross_entropy`, bf16
logits `cross_entropy_bf16`; fp32 math, int64 labels, fp32 loss): naive.cu -> versions/01..10 ->
expert.cu, one optimization mechanism per step.

Checked here without a GPU: the files, their `// klineage-step: mechanism=` headers, the ABI, the
static guard, that each step's signature text appears where its mechanism enters (and stays), that
the detectors see exactly the declared mechanism enter at each step, that the scripted versions walk
goes from the expert to the naive kernel, the workload contract, its inputs and its float64 oracle
on small shapes (against torch's own cross entropy), that the tolerance passes the naive kernel's
serial fp32 sum and fails a bf16 rounding or a lost peak, and that every rung compiles with nvcc
without spills (16-byte loads and ex2.approx.ftz in the expert). With a GPU (`requires_cuda`), every
rung is also run on the benchmark and probe shapes plus extra edge shapes at several pointer
offsets, on rows with masked (-inf) logits, and the vendor reference is checked against the oracle.
"""
from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.ladder_support import assert_versions_walk
from klineage.gate.guard import check_source, strip_comments
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[1]
DIRS = {"cross_entropy": ROOT / "expert_kernels" / "cross_entropy",
        "cross_entropy_bf16": ROOT / "expert_kernels" / "cross_entropy_bf16"}
WORKLOADS = list(DIRS)
# elements per 16-byte vector, the vector type, bytes per logit, the logits' C type
VEC = {"cross_entropy": (4, "float4"), "cross_entropy_bf16": (8, "uint4")}
ELEM = {"cross_entropy": 4, "cross_entropy_bf16": 2}
CTYPE = {"cross_entropy": "float", "cross_entropy_bf16": "__nv_bfloat16"}

LADDER = [
    ("01_restrict.cu", "restrict"),
    ("02_block_per_row.cu", "block_per_row"),
    ("03_warp_reduction.cu", "warp_reduction"),
    ("04_online_softmax.cu", "online_softmax"),
    ("05_vector_access.cu", "vector_access"),
    ("06_fast_math.cu", "fast_math"),
    ("07_launch_bounds.cu", "launch_bounds"),
    ("08_coarsening.cu", "coarsening"),
    ("09_unroll.cu", "unroll"),
    ("10_register_cache.cu", "register_cache"),
]
EXPERT_ADDS = "fast_exp2"
NAMES = [name for name, _ in LADDER]
RUNGS = ["naive.cu", *NAMES, "expert.cu"]
HEADER_RE = re.compile(r"\A// klineage-step: mechanism=([a-z_]+)[ \t]*\n// \S.*\n")

# Live-code text each mechanism brings in, from its step on (kept up to and including the expert).
ENTERS = {
    "restrict": [r"<T>\* __restrict__ logits", r"const long long\* __restrict__ labels",
                 r"float\* __restrict__ loss"],
    "block_per_row": [r"cross_entropy_block_kernel<<<batch, CE_BLOCK, 0, stream>>>", r"#define CE_BLOCK \d+",
                      r"__syncthreads\(\);", r"if \(tid == 0\) loss\[b\] = "],
    "warp_reduction": [r"v = fmaxf\(v, __shfl_xor_sync\(0xffffffffu, v, o\)\)",
                       r"v \+= __shfl_xor_sync\(0xffffffffu, v, o\)", r"__shared__ float s_warp\[CE_BLOCK / 32\]"],
    "online_softmax": [r"const float m_new = fmaxf\(m, x\);", r"float m = -FLT_MAX, s = 0\.0f;",
                       r"block_max\(m, s_warp\)"],
    "vector_access": [r"const <VEC>\* vp = reinterpret_cast<const <VEC>\*>\(row \+ head\);",
                      r"if \(tail0 \+ tid < vocab\)", r"if \(tid < head\)"],
    "fast_math": [r"__expf\("],
    "launch_bounds": [r"__launch_bounds__\(CE_BLOCK\)"],
    "coarsening": [r"#define CE_UNROLL 4", r"<VEC> v\[CE_UNROLL\];", r"online_step\(m, s, v\);"],
    "unroll": [r"#pragma unroll"],
    "register_cache": [r"float m_new = m;", r"float step_sum = 0\.0f;", r"s = s \* \S+\(.*\) \+ step_sum;"],
    "fast_exp2": [r"float ex2_ftz\(float t\)", r"\basm\(", r"#define CE_LOG2E",
                  r"fmaxf\(m_new \* CE_LOG2E, -FLT_MAX\)"],
}


def _dir(wl: str) -> Path:
    return DIRS[wl]


def _rung_source(wl: str, name: str) -> str:
    d = _dir(wl)
    return (d / "versions" / name if name[0].isdigit() else d / name).read_text()


def _code(source: str) -> str:
    return strip_comments(source)[0]


def _pats(wl: str, mech: str) -> list[str]:
    return [p.replace("<VEC>", VEC[wl][1]).replace("<T>", CTYPE[wl]) for p in ENTERS[mech]]


@pytest.fixture(scope="module", params=WORKLOADS)
def wl_name(request):
    return request.param


@pytest.fixture(scope="module")
def workload(wl_name):
    return load_workload(_dir(wl_name))


# ---------------------------------------------------------------- files and headers


def test_ladder_files_exist_in_order(wl_name):
    d = _dir(wl_name)
    assert sorted(p.name for p in (d / "versions").glob("*.cu")) == NAMES
    assert (d / "naive.cu").is_file() and (d / "expert.cu").is_file()
    meta = tomllib.loads((d / "versions" / "ladder.toml").read_text())
    assert meta["expert_adds"] == EXPERT_ADDS and meta["description"]


def test_headers_name_the_mechanisms_in_order(wl_name):
    found = []
    for name in NAMES:
        m = HEADER_RE.match(_rung_source(wl_name, name))
        assert m, f"{name}: no '// klineage-step: mechanism=<name>' header followed by a description line"
        found.append(m.group(1))
    assert found == [mech for _, mech in LADDER]
    for name in ("naive.cu", "expert.cu"):  # the ends of the ladder declare no step in their header
        assert not HEADER_RE.match(_rung_source(wl_name, name))


@pytest.mark.parametrize("name", RUNGS)
def test_abi_and_contract(name, wl_name, workload):
    src = _rung_source(wl_name, name)
    code = _code(src)
    assert "#include <cuda_runtime.h>" in src
    assert src.count(workload.c_signature) == 1, f"{name}: must export {workload.c_signature}"
    assert re.search(r"<<<[^>]*,\s*0,\s*stream>>>", code), f"{name}: launches not on the stream argument"
    assert "return cudaGetLastError();" in code
    assert "if (batch <= 0) return cudaSuccess;" in code, f"{name}: a zero-block grid is a launch error"
    assert not re.search(r"\batomic\w*\s*\(", code), f"{name}: uses atomics"
    assert not re.search(r"\bstatic\b", code), f"{name}: keeps static state"
    # a label outside [0, vocab) is answered with NaN, never read through
    assert "label >= 0 && label < vocab" in code and "__int_as_float(0x7fc00000)" in code
    assert ("cuda_bf16.h" in src) == (wl_name == "cross_entropy_bf16")


@pytest.mark.parametrize("name", RUNGS)
def test_static_guard(name, wl_name, workload):
    res = check_source(_rung_source(wl_name, name), workload)
    assert res.ok, f"{name}: {res.summary}"


def test_each_mechanism_enters_at_its_step(wl_name):
    mechs = [mech for _, mech in LADDER] + [EXPERT_ADDS]
    codes = [_code(_rung_source(wl_name, n)) for n in NAMES + ["expert.cu"]]
    naive = _code(_rung_source(wl_name, "naive.cu"))
    for i, mech in enumerate(mechs):
        for pat in _pats(wl_name, mech):
            assert not any(re.search(pat, c) for c in [naive] + codes[:i]), f"{pat!r} appears before its step"
            for later, code in zip((NAMES + ["expert.cu"])[i:], codes[i:]):
                assert re.search(pat, code), f"{later} lacks {mech} ({pat!r})"
    v = dict(zip(NAMES + ["expert.cu"], codes))
    row_loops = lambda c: len(re.findall(r"for \(int c = tid; c < vocab; c \+= CE_BLOCK\)", c))
    # 02: a shared-memory tree (replaced by shuffles in 03), two passes over the row (one from 04 on)
    assert "s_tree" in v["02_block_per_row.cu"] and "__shfl" not in v["02_block_per_row.cu"]
    assert all("s_tree" not in v[n] for n in NAMES[2:])
    assert row_loops(v["02_block_per_row.cu"]) == row_loops(v["03_warp_reduction.cu"]) == 2
    assert row_loops(v["04_online_softmax.cu"]) == 1 and row_loops(v["05_vector_access.cu"]) == 0
    # precise expf up to 05; 06 turns every one into __expf (logf stays)
    assert re.search(r"(?<!_)\bexpf\(", v["05_vector_access.cu"])
    assert all(not re.search(r"(?<![_\w])expf\(", v[n]) for n in NAMES[5:] + ["expert.cu"])
    assert all(re.search(r"(?<![_\w])logf\(", c) for c in codes)
    # 08 coarsens without #pragma; 09 adds exactly the five pragmas
    assert v["08_coarsening.cu"].count("#pragma") == 0 and v["09_unroll.cu"].count("#pragma unroll") == 5
    # the per-element update is what register_cache replaces in the step (it stays for head and tail)
    per_element = re.compile(r"online_update2?\(m, s, v\[k\]\.x\);")
    assert per_element.search(v["09_unroll.cu"]) and not per_element.search(v["10_register_cache.cu"])
    assert all("online_update(m, s, " in c for c in codes[3:])


def _kernel_and_host(code: str) -> str:
    return code[code.index("__global__ void __launch_bounds__(CE_BLOCK)"):]


def test_expert_is_the_last_version_with_base2_exponentials(wl_name):
    v10 = _code(_rung_source(wl_name, "10_register_cache.cu"))
    expert = _code(_rung_source(wl_name, "expert.cu"))
    # the kernel, the host entry point and every tuning default are the same; only the step's
    # exponentials changed (online_step and its helpers above the kernel)
    assert _kernel_and_host(v10) == _kernel_and_host(expert)
    defines = lambda c: dict(re.findall(r"#define (CE_(?:BLOCK|UNROLL)) (\S+)", c))
    assert defines(v10) == defines(expert) and set(defines(expert)) == {"CE_BLOCK", "CE_UNROLL"}
    assert "ex2_ftz(" not in v10 and expert.count("ex2_ftz(") >= 4


def test_detectors_see_only_the_declared_mechanism_enter(wl_name):
    from klineage.mechanisms.audit import audit_version
    from klineage.mechanisms import detect_all, registry

    known = {n for n, m in registry().items() if getattr(m, "DETECTABLE", True)}
    assert {"register_cache", "fast_exp2", "block_per_row"}.isdisjoint(known)
    feats = [detect_all(_rung_source(wl_name, n)) for n in RUNGS]
    mechs = [mech for _, mech in LADDER] + [EXPERT_ADDS]
    for i, mech in enumerate(mechs):
        a = audit_version(feats[i + 1], feats[i], mech, known)
        assert a["ok"], (RUNGS[i + 1], a["reason"])
    assert {f.mechanism for f in feats[-1]} == {"restrict", "warp_reduction", "online_softmax", "vector_access",
                                                 "fast_math", "launch_bounds", "coarsening", "unroll"}


def test_versions_ladder_walks_to_the_naive_kernel(wl_name, workload):
    assert_versions_walk(workload, _dir(wl_name), LADDER, EXPERT_ADDS)


# ---------------------------------------------------------------- the workload contract and oracle


def test_workload_contract(wl_name, workload):
    assert workload.name == wl_name and workload.entry == wl_name
    bf16 = wl_name == "cross_entropy_bf16"
    assert workload.dtypes == (("bfloat16", "int64", "float32") if bf16 else ("float32", "int64"))
    assert [(a.name, a.kind, a.dtype, a.role) for a in workload.args] == [
        ("logits", "ptr", "bfloat16" if bf16 else "float32", "in"), ("labels", "ptr", "int64", "in"),
        ("loss", "ptr", "float32", "out"), ("batch", "int", None, None), ("vocab", "int", None, None)]
    assert [dict(s) for s in workload.benchmark_cases] == [{"batch": 4096, "vocab": 32000},
                                                           {"batch": 4096, "vocab": 128256}]
    for _, s in workload.all_shapes():
        b, v = s["batch"], s["vocab"]
        assert workload.bytes_moved(s) == b * v * ELEM[wl_name] + b * 8 + b * 4
        assert workload.flops(s) == 4 * b * v
        assert workload.outputs(s) == {"loss": ((b,), "float32")}
        assert workload.scalars(s) == {"batch": b, "vocab": v}
    assert workload.tolerance.min_matched == 1.0 and workload.tolerance.rtol == 1e-4
    assert workload.vendor_name.startswith("torch.compile(F.cross_entropy(")
    assert ("logits.float()" in workload.vendor_name) == bf16


def test_probe_shapes_stress_the_kernels_assumptions(wl_name, workload):
    vec, _ = VEC[wl_name]
    probes = [dict(s) for s in workload.probe_shapes]
    offsets = {workload.pointer_offset(s) for s in probes}
    assert {1, 3} <= offsets, "misaligned bases (offsets 1 and 3) must be probed"
    assert {"batch": 1, "vocab": 1} in probes
    assert any(s["batch"] == 1 and s["vocab"] >= 100_000 for s in probes), "one long row"
    assert any(s["vocab"] < 32 for s in probes), "rows shorter than a warp"
    assert sum(s["vocab"] % vec != 0 for s in probes) >= 6, "vocabularies that are no multiple of the vector"
    assert {32001, 128257} <= {s["vocab"] for s in probes}
    assert any(s["batch"] > 100 for s in probes), "many rows (many blocks)"
    # small enough that every rung runs the whole probe set in well under a second on a GPU
    assert sum(s["batch"] * s["vocab"] for s in probes) < 2_000_000


SMALL = [{"batch": 1, "vocab": 1}, {"batch": 3, "vocab": 7}, {"batch": 9, "vocab": 33}, {"batch": 6, "vocab": 1030},
         {"batch": 5, "vocab": 4099}]


def test_reference_is_torch_cross_entropy_in_float64(wl_name, workload):
    import torch
    import torch.nn.functional as F

    from klineage.gate.correctness import compare, negative_controls

    for shape in SMALL:
        inputs = workload.make_inputs(shape, seed=3)
        x, lab = inputs["logits"], inputs["labels"]
        assert x.shape == (shape["batch"], shape["vocab"]) and lab.shape == (shape["batch"],)
        assert x.dtype == (torch.float32 if wl_name == "cross_entropy" else torch.bfloat16)
        assert lab.dtype == torch.int64 and int(lab.min()) >= 0 and int(lab.max()) < shape["vocab"]
        ref = workload.reference(inputs, shape)["loss"]
        assert ref.dtype == torch.float64 and tuple(ref.shape) == (shape["batch"],)
        want = F.cross_entropy(x.double(), lab, reduction="none")
        assert torch.allclose(ref, want, rtol=1e-12, atol=1e-12)
        # torch's fp32 cross entropy (what the vendor computes, here eager on the CPU) passes
        assert compare(F.cross_entropy(x.float(), lab, reduction="none"), ref, workload.tolerance).ok
        assert torch.isfinite(ref).all() and (ref >= 0).all()
        if shape["vocab"] > 1:
            controls = negative_controls(workload, inputs, {"loss": ref}, shape)
            assert controls["zeros"]["rejected"] and controls["copy_of_input"]["rejected"], controls
    # the float64 reference is computed in row chunks: chunking changes nothing
    shape = {"batch": 11, "vocab": 37}
    inputs = workload.make_inputs(shape, seed=5)
    whole = workload.reference(inputs, shape)["loss"]
    old = workload.module._REF_ELEMS
    try:
        workload.module._REF_ELEMS = 100  # 2 rows per chunk
        assert torch.equal(workload.reference(inputs, shape)["loss"], whole)
    finally:
        workload.module._REF_ELEMS = old


def test_inputs_have_the_four_row_kinds(wl_name, workload):
    import torch

    shape = {"batch": 8, "vocab": 4099}
    x = workload.make_inputs(shape, seed=2)["logits"].double()
    mean = x.mean(dim=1)
    assert mean[0::4].abs().max() < 1 and mean[1::4].abs().max() < 1
    assert (mean[2::4] > 95).all() and (mean[3::4] < -95).all()  # exp overflows / underflows in fp32
    lse = torch.logsumexp(x, dim=1)
    # rows 1, 2, 3 (mod 4) carry a peak of about half the row's probability mass; 2 and 3 at the ends
    for r, col in ((2, -1), (3, 0), (6, -1), (7, 0)):
        assert 0.3 < float(torch.exp(x[r, col] - lse[r])) < 0.7
    for r in (1, 5):
        assert 0.3 < float(torch.exp(x[r].max() - lse[r])) < 0.7
    for r in (0, 4):
        assert float(torch.exp(x[r].max() - lse[r])) < 0.3


def test_make_inputs_deterministic_and_seed_dependent(workload):
    import torch

    shape = {"batch": 5, "vocab": 9}
    a1, a2, b = workload.make_inputs(shape, 1), workload.make_inputs(shape, 1), workload.make_inputs(shape, 2)
    assert torch.equal(a1["logits"], a2["logits"]) and torch.equal(a1["labels"], a2["labels"])
    assert not torch.equal(a1["logits"], b["logits"])


def test_tolerance_passes_a_serial_fp32_sum_and_fails_real_errors(wl_name, workload):
    """The naive kernel's serial fp32 sum (emulated here with a float32 cumsum) passes with margin;
    a loss rounded to bf16 and a lost peak fail."""
    import torch

    from klineage.gate.correctness import compare

    shape = {"batch": 8, "vocab": 128256}
    inputs = workload.make_inputs(shape, seed=1)
    x, lab = inputs["logits"].float(), inputs["labels"]
    ref = workload.reference(inputs, shape)["loss"]
    m = x.max(dim=1).values
    serial = torch.cumsum(torch.exp(x - m[:, None]), dim=1, dtype=torch.float32)[:, -1]
    naive = m + torch.log(serial) - x.gather(1, lab[:, None]).squeeze(1)
    tol = workload.tolerance
    err = (naive.double() - ref).abs()
    assert (err < 0.5 * tol.rtol * ref.abs()).all(), "the naive kernel's error must sit well inside the tolerance"
    assert compare(naive, ref, tol).ok
    assert not compare(ref.to(torch.bfloat16), ref, tol).ok
    lost = ref.clone()
    lost[2] = torch.logsumexp(x[2, :-1].double(), dim=0) - x[2, lab[2]].double()  # row 2 without its tail peak
    assert not compare(lost, ref, tol).ok


# ---------------------------------------------------------------- nvcc


@pytest.mark.nvcc
@pytest.mark.parametrize("name", RUNGS)
def test_compiles(name, wl_name):
    from klineage.gate.compile import compile_kernel

    res = compile_kernel(_rung_source(wl_name, name))
    assert res.ok, f"{name}: {res.error_message}\n{res.log}"
    assert res.resources, f"{name}: no ptxas resource report"
    assert not res.spills, f"{name}: spills registers"
    assert all(r.stack_bytes == 0 for r in res.resources), f"{name}: a register array went to local memory"


COMPILE_VARIANTS = [("-DCE_BLOCK=32",), ("-DCE_BLOCK=1024",), ("-DCE_UNROLL=1",), ("-DCE_UNROLL=8",)]


@pytest.mark.nvcc
@pytest.mark.parametrize("flags", COMPILE_VARIANTS, ids=["block32", "block1024", "unroll1", "unroll8"])
def test_expert_configurations_compile(flags, wl_name):
    from klineage.gate.compile import compile_kernel

    res = compile_kernel(_rung_source(wl_name, "expert.cu"), extra_flags=flags)
    assert res.ok, f"{flags}: {res.error_message}\n{res.log}"
    assert not res.spills, f"{flags}: spills registers"


@pytest.mark.nvcc
def test_expert_loads_16_byte_vectors_and_uses_ex2_ftz(wl_name, tmp_path):
    src = tmp_path / "expert.cu"
    src.write_text(_rung_source(wl_name, "expert.cu"))
    ptx = tmp_path / "expert.ptx"
    subprocess.run(["nvcc", "-O3", "-ptx", "-gencode=arch=compute_90a,code=sm_90a", str(src), "-o", str(ptx)],
                   check=True, capture_output=True, timeout=120)
    text = ptx.read_text()
    kind = "f32" if wl_name == "cross_entropy" else "u32"
    assert len(re.findall(rf"ld\.global\.nc\.v4\.{kind}", text)) >= 8, "CE_UNROLL 16-byte read-only loads, twice"
    assert len(re.findall(r"ex2\.approx\.ftz\.f32", text)) >= 16
    assert "ld.local" not in text and "st.local" not in text


# ---------------------------------------------------------------- GPU: every rung against the oracle

EXTRA_SHAPES = [
    {"batch": 2, "vocab": 2}, {"batch": 3, "vocab": 8}, {"batch": 3, "vocab": 9}, {"batch": 4, "vocab": 31},
    {"batch": 4, "vocab": 32}, {"batch": 1, "vocab": 2047}, {"batch": 2, "vocab": 2048}, {"batch": 3, "vocab": 2049},
    {"batch": 5, "vocab": 8191}, {"batch": 4, "vocab": 16385}, {"batch": 3, "vocab": 65537},
    {"batch": 64, "vocab": 32000}, {"batch": 300, "vocab": 4093},
]
VARIANT_FLAGS = [("-DCE_BLOCK=32",), ("-DCE_BLOCK=1024",), ("-DCE_UNROLL=1",), ("-DCE_UNROLL=2",),
                 ("-DCE_UNROLL=8",)]
VARIANTS = [(n, ()) for n in RUNGS] + [("expert.cu", f) for f in VARIANT_FLAGS] + [
    ("10_register_cache.cu", ("-DCE_BLOCK=64",)), ("02_block_per_row.cu", ("-DCE_BLOCK=1024",))]


def _placed(t, offset: int, fill):
    """A copy of `t` that starts `offset` elements past an aligned allocation, with `fill` around it."""
    import torch

    n = t.numel()
    buf = torch.full((n + offset + 1,), fill, dtype=t.dtype, device="cuda")
    view = buf[offset:offset + n].view(t.shape)
    view.copy_(t)
    return buf, view


def _run_rung(cand, workload, wl_name, shape, inputs, offset, where):
    import torch

    from klineage.gate.correctness import compare

    b = shape["batch"]
    ref = workload.reference(inputs, shape)["loss"]
    xbuf, xs = _placed(inputs["logits"], offset, float("nan"))
    lbuf, ls = _placed(inputs["labels"], offset, -(1 << 40))
    obuf, out = _placed(torch.zeros(b, dtype=torch.float32, device="cuda"), offset, float("nan"))
    out.fill_(float("nan"))
    rc = cand.call({"logits": xs, "labels": ls, "loss": out}, workload.scalars(shape), torch.cuda.current_stream())
    torch.cuda.synchronize()
    assert rc == 0, f"{where}: cudaError {rc}"
    cmp = compare(out, ref, workload.tolerance)
    assert cmp.ok, f"{where}: {cmp.reason}"
    assert torch.isnan(obuf[:offset]).all() and torch.isnan(obuf[offset + b]), f"{where}: wrote outside loss"
    assert torch.equal(xs, inputs["logits"]) and torch.equal(ls, inputs["labels"]), f"{where}: modified an input"


@pytest.mark.requires_cuda
@pytest.mark.nvcc
@pytest.mark.parametrize("name,flags", VARIANTS, ids=[f"{n}{''.join(f)}" for n, f in VARIANTS])
def test_rung_matches_oracle_on_gpu(name, flags, wl_name, workload):
    from klineage.gate.compile import compile_kernel
    from klineage.gate.worker import Candidate

    res = compile_kernel(_rung_source(wl_name, name), extra_flags=flags)
    assert res.ok, res.log
    cand = Candidate(res.so_path, workload)
    for kind, shape in list(workload.all_shapes()) + [("extra", s) for s in EXTRA_SHAPES]:
        if kind == "benchmark" and name in ("naive.cu", "01_restrict.cu"):
            shape = dict(shape, batch=256)  # one thread per row: tens of ms on the full cases
        inputs = workload.make_inputs(shape, seed=7, device="cuda")
        n = shape["batch"] * shape["vocab"]
        offsets = (0, 1, 2, 3, 7) if n <= 1 << 22 else (0,)
        if workload.pointer_offset(shape):
            offsets = (workload.pointer_offset(shape),)
        for offset in offsets:
            _run_rung(cand, workload, wl_name, shape, inputs, offset, f"{name} {flags} {shape} offset {offset}")


@pytest.mark.requires_cuda
@pytest.mark.nvcc
@pytest.mark.parametrize("name", RUNGS)
def test_masked_logits_are_ignored_on_gpu(name, wl_name, workload):
    """-inf logits (a masked or padded vocabulary) add exp(-inf) = 0: whole 16-byte vectors, whole
    steps of a thread, and all but a few columns of a row."""
    import torch

    from klineage.gate.compile import compile_kernel
    from klineage.gate.worker import Candidate

    res = compile_kernel(_rung_source(wl_name, name))
    assert res.ok, res.log
    cand = Candidate(res.so_path, workload)
    for shape in ({"batch": 8, "vocab": 40000}, {"batch": 5, "vocab": 4099}, {"batch": 4, "vocab": 7}):
        inputs = workload.make_inputs(shape, seed=11, device="cuda")
        x = inputs["logits"].float()
        v = shape["vocab"]
        x[0, : v // 2] = float("-inf")
        x[1, 1::2] = float("-inf")
        x[2, :] = float("-inf")
        x[2, [0, v // 3, v - 1]] = torch.tensor([1.0, 2.0, 3.0], device="cuda")
        keep = torch.isfinite(x)
        lab = inputs["labels"]
        for r in range(3):  # labels on finite logits
            cols = torch.nonzero(keep[r]).flatten()
            lab[r] = cols[int(lab[r]) % cols.numel()]
        inputs = {"logits": x.to(inputs["logits"].dtype), "labels": lab}
        for offset in (0, 1, 3):
            _run_rung(cand, workload, wl_name, shape, inputs, offset, f"{name} masked {shape} offset {offset}")


@pytest.mark.requires_cuda
def test_vendor_matches_the_oracle_on_gpu(wl_name, workload):
    import torch

    from klineage.gate.correctness import compare

    for shape in workload.benchmark_cases:
        inputs = workload.make_inputs(shape, seed=3, device="cuda")
        got = workload.vendor(inputs, shape)["loss"]
        assert got.dtype == torch.float32 and tuple(got.shape) == (shape["batch"],)
        assert compare(got, workload.reference(inputs, shape)["loss"], workload.tolerance).ok
