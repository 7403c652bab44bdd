"""The hand-made version ladder of swiglu (bf16 out = silu(a) * b): naive.cu -> versions/01..06 ->
expert.cu, one optimization mechanism per step.

Checked here without a GPU: the files, their `// klineage-step: mechanism=` headers, the ABI, the
static guard, that each step's signature text appears where its mechanism enters (and stays), that
the detectors see exactly the declared mechanism enter at each step, that the scripted versions walk
goes from the expert to the naive kernel, the workload contract and its oracle on small shapes, and
that every rung compiles with nvcc (with 16-byte global accesses from the vector step on). With a
GPU (`requires_cuda`), every rung is also run on the benchmark and probe shapes plus extra edge
shapes at several pointer offsets, and checked against the oracle and for writes outside `out`.
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
WORKLOAD_DIR = ROOT / "expert_kernels" / "swiglu"
VERSIONS_DIR = WORKLOAD_DIR / "versions"

LADDER = [
    ("01_restrict.cu", "restrict"),
    ("02_launch_bounds.cu", "launch_bounds"),
    ("03_fast_math.cu", "fast_math"),
    ("04_vector_access.cu", "vector_access"),
    ("05_cache_hint.cu", "cache_hint"),
    ("06_coarsening.cu", "coarsening"),
]
EXPERT_ADDS = "unroll"
NAMES = [name for name, _ in LADDER]
RUNGS = ["naive.cu", *NAMES, "expert.cu"]
HEADER_RE = re.compile(r"\A// klineage-step: mechanism=([a-z_]+)[ \t]*\n// \S.*\n")

# Live-code text each mechanism brings in, from its step on (kept up to and including the expert).
ENTERS = {
    "restrict": [r"const __nv_bfloat16\* __restrict__ a, const __nv_bfloat16\* __restrict__ b"],
    "launch_bounds": [r"__launch_bounds__\(SWIGLU_BLOCK\)", r"#define SWIGLU_BLOCK 256"],
    "fast_math": [r"__expf\(-a\)", r"__frcp_rn\(", r"float silu_mul\(float a, float b\)"],
    "vector_access": [r"const uint4\* __restrict__ a", r"& 15u\) == 0", r"swiglu8\(", r"swiglu_scalar_kernel",
                      r"nvec \* 8 \+ threadIdx\.x"],
    "cache_hint": [r"__ldg\(p\)", r"SG_LOAD\(", r"#define SWIGLU_LOAD_MODE 0"],
    "coarsening": [r"#define SWIGLU_UNROLL 4", r"va\[UNROLL\]", r"template <int BLOCK, int UNROLL>"],
    "unroll": [r"#pragma unroll"],
}
ELEMENTS_PER_VECTOR = 8  # bf16 in one 16-byte uint4


def _rung_source(name: str) -> str:
    return (VERSIONS_DIR / name if name[0].isdigit() else WORKLOAD_DIR / name).read_text()


def _code(source: str) -> str:
    return strip_comments(source)[0]


def _lines(code: str) -> list[str]:
    return [ln.rstrip() for ln in code.splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def workload():
    return load_workload(WORKLOAD_DIR)


# ---------------------------------------------------------------- files and headers


def test_ladder_files_exist_in_order():
    present = sorted(p.name for p in VERSIONS_DIR.glob("*.cu"))
    assert present == NAMES
    assert not (VERSIONS_DIR / "naive.cu").exists() and not (VERSIONS_DIR / "expert.cu").exists()
    assert all((WORKLOAD_DIR / n).is_file() for n in ("naive.cu", "expert.cu", "workload.py"))


def test_headers_name_the_mechanisms_in_order():
    found = []
    for name in NAMES:
        m = HEADER_RE.match(_rung_source(name))
        assert m, f"{name}: no '// klineage-step: mechanism=<name>' header followed by a description line"
        found.append(m.group(1))
    assert found == [mech for _, mech in LADDER]
    meta = tomllib.loads((VERSIONS_DIR / "ladder.toml").read_text())
    assert meta["expert_adds"] == EXPERT_ADDS and meta["description"]
    for name in ("naive.cu", "expert.cu"):
        assert not HEADER_RE.match(_rung_source(name)), f"{name} must not declare a step"


@pytest.mark.parametrize("name", RUNGS)
def test_abi_and_contract(name, workload):
    src = _rung_source(name)
    code = _code(src)
    assert "#include <cuda_runtime.h>" in src and "#include <cuda_bf16.h>" in src
    flat = re.sub(r"\s+", " ", src)  # the signature may wrap over lines
    assert flat.count(workload.c_signature) == 1, f"{name}: must export {workload.c_signature}"
    launches = re.findall(r"<<<[^>]*>>>", code)
    assert launches and all(re.search(r",\s*0,\s*stream>>>$", x) for x in launches), \
        f"{name}: launches not on the stream argument"
    assert "return cudaGetLastError();" in code
    assert not re.search(r"\batomic\w*\s*\(", code), f"{name}: uses atomics"
    assert not re.search(r"\bstatic\b", code), f"{name}: keeps static state"


@pytest.mark.parametrize("name", RUNGS)
def test_static_guard(name, workload):
    res = check_source(_rung_source(name), workload)
    assert res.ok, f"{name}: {res.summary}"


def test_each_mechanism_enters_at_its_step():
    mechs = [mech for _, mech in LADDER] + [EXPERT_ADDS]
    names = NAMES + ["expert.cu"]
    codes = [_code(_rung_source(n)) for n in names]
    naive = _code(_rung_source("naive.cu"))
    for i, mech in enumerate(mechs):
        for pat in ENTERS[mech]:
            before = [naive] + codes[:i]
            assert not any(re.search(pat, c) for c in before), f"{pat!r} appears before step {names[i]}"
            assert re.search(pat, codes[i]), f"{names[i]}: {pat!r} missing"
            for later_name, later in zip(names[i + 1:], codes[i + 1:]):
                assert re.search(pat, later), f"{later_name} lost {mech} ({pat!r})"
    # the restrict step changes nothing but the three pointer parameters
    strip_restrict = lambda c: _lines(c.replace(" __restrict__", ""))
    assert [ln.replace(" ", "") for ln in strip_restrict(codes[0])] == \
        [ln.replace(" ", "") for ln in strip_restrict(naive)]
    # 04 and 05 differ only in the load/store helpers; 05 keeps one vector per thread
    assert "UNROLL" not in codes[4] and "#pragma" not in codes[5]


def test_expert_is_the_last_version_with_unroll_pragmas():
    """Apart from its comments, expert.cu is 06 verbatim plus four `#pragma unroll` lines."""
    v06 = _lines(_code(_rung_source("06_coarsening.cu")))
    expert = _lines(_code(_rung_source("expert.cu")))
    assert sum(ln.strip() == "#pragma unroll" for ln in expert) == 4
    assert [ln for ln in expert if ln.strip() != "#pragma unroll"] == v06


# ---------------------------------------------------------------- detectors and the versions walk


def test_detectors_see_only_the_declared_mechanism_enter():
    from klineage.mechanisms import detect_all, registry

    known = {m.NAME for m in registry().values() if m.DETECTABLE}
    kinds = []
    for name in RUNGS:
        counts: dict[str, int] = {}
        for f in detect_all(_rung_source(name)):
            counts[f.mechanism] = counts.get(f.mechanism, 0) + 1
        kinds.append(counts)
    assert kinds[0] == {}, f"naive.cu must have no detected mechanism, has {kinds[0]}"
    steps = [mech for _, mech in LADDER] + [EXPERT_ADDS]
    for i, mech in enumerate(steps):
        before, after = kinds[i], kinds[i + 1]
        assert mech in known, f"{mech} should be a detected mechanism"
        assert set(before) <= set(after), f"{RUNGS[i + 1]} loses {set(before) - set(after)}"
        assert set(after) - set(before) == {mech}, (RUNGS[i + 1], before, after)
        assert after.get(mech, 0) > before.get(mech, 0), (RUNGS[i + 1], before, after)
    assert set(kinds[-1]) == {"restrict", "launch_bounds", "fast_math", "vector_access", "cache_hint",
                              "coarsening", "unroll"}


def test_versions_ladder_walks_to_the_naive_kernel(workload):
    # 04 adds, with its vector access, a scalar grid-stride fallback: a form of coarsening the evidence
    # reads (no rule takes it off), so the step is labelled with both
    assert_versions_walk(workload, WORKLOAD_DIR, LADDER, EXPERT_ADDS, {"vector_access": "coarsening+vector_access"})


# ---------------------------------------------------------------- the workload contract and oracle


def test_workload_contract(workload):
    assert workload.name == "swiglu" and workload.entry == "swiglu" and workload.family == "elementwise"
    assert workload.dtypes == ("bfloat16",)
    assert workload.input_names == ("a", "b") and workload.output_names == ("out",)
    assert [dict(s) for s in workload.benchmark_cases] == [{"rows": 16384, "cols": 8192}]
    for _, s in workload.all_shapes():
        n = s["rows"] * s["cols"]
        assert workload.bytes_moved(s) == 3 * 2 * n  # read a and b, write out, 2 bytes each
        assert workload.flops(s) == 5 * n
        assert workload.outputs(s) == {"out": ((s["rows"], s["cols"]), "bfloat16")}
        assert workload.scalars(s) == {"rows": s["rows"], "cols": s["cols"]}
    assert workload.tolerance.rtol == 1e-2 and workload.tolerance.atol == 1e-2


def test_probe_shapes_stress_the_kernels_assumptions(workload):
    probes = [dict(s) for s in workload.probe_shapes]
    offsets = {workload.pointer_offset(s) for s in probes}
    assert {1, 3} <= offsets, "misaligned bases (offsets 1 and 3) must be probed"
    assert any(o and (2 * o) % 16 == 0 for o in offsets), "a 16-byte aligned, non-256-byte base"
    assert {"rows": 1, "cols": 1} in probes
    sizes = [s["rows"] * s["cols"] for s in probes]
    assert any(n < ELEMENTS_PER_VECTOR for n in sizes), "fewer elements than one vector"
    assert any(n % ELEMENTS_PER_VECTOR and n > 1 << 20 for n in sizes), "a large size with a tail"
    # a misaligned probe larger than the scalar fallback's grid (4096 blocks of 256): its loop runs twice
    assert any(workload.pointer_offset(s) % 8 and s["rows"] * s["cols"] > 4096 * 256 for s in probes)
    assert any(s["cols"] % 2 for s in probes) and any(s["rows"] % 2 for s in probes)
    # the whole probe set is small (it runs in well under a second on a GPU, for every rung)
    assert sum(sizes) < 16_000_000


def test_reference_is_silu_times_b_in_float64(workload):
    import torch
    import torch.nn.functional as F

    from klineage.gate.correctness import compare, negative_controls

    for shape in [{"rows": 1, "cols": 1}, {"rows": 3, "cols": 5}, {"rows": 17, "cols": 33}, {"rows": 64, "cols": 200}]:
        inputs = workload.make_inputs(shape, seed=3)
        a, b = inputs["a"], inputs["b"]
        assert a.shape == b.shape == (shape["rows"], shape["cols"])
        assert a.dtype == b.dtype == torch.bfloat16 and a.is_contiguous() and b.is_contiguous()
        ref = workload.reference(inputs, shape)["out"]
        assert ref.dtype == torch.float64 and tuple(ref.shape) == (shape["rows"], shape["cols"])
        ad, bd = a.double(), b.double()
        assert torch.allclose(ref, F.silu(ad) * bd, rtol=1e-12, atol=1e-12)
        assert torch.allclose(ref, ad / (1.0 + torch.exp(-ad)) * bd, rtol=1e-12, atol=1e-12)
        vend = workload.vendor(inputs, shape)["out"]
        assert vend.dtype == torch.bfloat16
        assert compare(vend, ref, workload.tolerance).ok
        if a.numel() > 8:
            controls = negative_controls(workload, inputs, {"out": ref}, shape)
            assert controls["zeros"]["rejected"] and controls["copy_of_input"]["rejected"], controls
            # a wrong formula (silu(b) * a, or a * b) fails
            assert not compare(F.silu(bd) * ad, ref, workload.tolerance).ok
            assert not compare(ad * bd, ref, workload.tolerance).ok


def test_make_inputs_deterministic_and_seed_dependent(workload):
    shape = {"rows": 5, "cols": 9}
    i1, i2, j = workload.make_inputs(shape, 1), workload.make_inputs(shape, 1), workload.make_inputs(shape, 2)
    assert all(torch_equal(i1[k], i2[k]) for k in ("a", "b"))
    assert not torch_equal(i1["a"], j["a"]) and not torch_equal(i1["b"], j["b"])
    assert not torch_equal(i1["a"], i1["b"]), "a and b are independent draws"


def torch_equal(x, y) -> bool:
    return bool((x == y).all())


# ---------------------------------------------------------------- nvcc


@pytest.mark.nvcc
@pytest.mark.parametrize("name", RUNGS)
def test_compiles(name):
    from klineage.gate.compile import compile_kernel

    res = compile_kernel(_rung_source(name))
    assert res.ok, f"{name}: {res.error_message}\n{res.log}"
    assert res.resources, f"{name}: no ptxas resource report"
    assert not res.spills, f"{name}: spills registers"


COMPILE_VARIANTS = [("-DSWIGLU_UNROLL=1",), ("-DSWIGLU_UNROLL=8", "-DSWIGLU_BLOCK=128"),
                    ("-DSWIGLU_LOAD_MODE=1", "-DSWIGLU_STORE_CS=1"), ("-DSWIGLU_LOAD_MODE=2",)]


@pytest.mark.nvcc
@pytest.mark.parametrize("flags", COMPILE_VARIANTS, ids=["unroll1", "unroll8-block128", "evict-first", "l2-prefetch"])
def test_expert_configurations_compile(flags):
    from klineage.gate.compile import compile_kernel

    res = compile_kernel(_rung_source("expert.cu"), extra_flags=flags)
    assert res.ok, f"{flags}: {res.error_message}\n{res.log}"
    assert not res.spills, f"{flags}: spills registers"


@pytest.mark.nvcc
@pytest.mark.parametrize("name,unroll", [("04_vector_access.cu", 1), ("05_cache_hint.cu", 1),
                                         ("06_coarsening.cu", 4), ("expert.cu", 4)])
def test_vector_rungs_move_16_byte_vectors(name, unroll, tmp_path):
    src = tmp_path / name
    src.write_text(_rung_source(name))
    ptx = tmp_path / "k.ptx"
    subprocess.run(["nvcc", "-O3", "-ptx", "-gencode=arch=compute_90a,code=sm_90a", str(src), "-o", str(ptx)],
                   check=True, capture_output=True, timeout=120)
    text = ptx.read_text()
    # interior tile: UNROLL vectors of a and of b; the last tile's bounds-checked copy may drop one
    assert len(re.findall(r"ld\.global\.nc\.v4\.u32", text)) >= 2 * unroll, "16-byte read-only loads"
    assert len(re.findall(r"st\.global\.v4\.u32", text)) >= unroll, "16-byte stores to out"
    assert "ld.local" not in text and "st.local" not in text


# ---------------------------------------------------------------- GPU: every rung against the oracle

EXTRA_SHAPES = [
    {"rows": 1, "cols": 7}, {"rows": 1, "cols": 8}, {"rows": 1, "cols": 9}, {"rows": 2, "cols": 4},
    {"rows": 16, "cols": 16}, {"rows": 1, "cols": 2048}, {"rows": 1, "cols": 2049}, {"rows": 3, "cols": 8191},
    {"rows": 8, "cols": 1024}, {"rows": 5, "cols": 1048577},
]
VARIANT_FLAGS = [("-DSWIGLU_UNROLL=1",), ("-DSWIGLU_UNROLL=8",), ("-DSWIGLU_BLOCK=128",),
                 ("-DSWIGLU_LOAD_MODE=1", "-DSWIGLU_STORE_CS=1"), ("-DSWIGLU_LOAD_MODE=2",),
                 ("-DSWIGLU_SCALAR_GRID=1",)]
VARIANTS = [(n, ()) for n in RUNGS] + [("expert.cu", f) for f in VARIANT_FLAGS]


@pytest.mark.requires_cuda
@pytest.mark.nvcc
@pytest.mark.parametrize("name,flags", VARIANTS, ids=[f"{n}{''.join(f)}" for n, f in VARIANTS])
def test_rung_matches_oracle_on_gpu(name, flags, workload):
    import torch

    from klineage.gate.compile import compile_kernel
    from klineage.gate.correctness import compare
    from klineage.gate.worker import Candidate

    res = compile_kernel(_rung_source(name), extra_flags=flags)
    assert res.ok, res.log
    cand = Candidate(res.so_path, workload)
    stream = torch.cuda.current_stream()
    shapes = [s for _, s in workload.all_shapes()] + EXTRA_SHAPES
    for shape in shapes:
        rows, cols = shape["rows"], shape["cols"]
        n = rows * cols
        inputs = workload.make_inputs(shape, seed=7, device="cuda")
        ref = workload.reference(inputs, shape)["out"]
        offsets = (0, 1, 2, 3, 4, 8) if n <= 1 << 22 else (0,)
        if workload.pointer_offset(shape):
            offsets = (workload.pointer_offset(shape),)
        for offset in offsets:
            placed = {}
            for k, v in inputs.items():
                buf = torch.empty(n + offset, dtype=torch.bfloat16, device="cuda")
                placed[k] = buf[offset:].view(rows, cols)
                placed[k].copy_(v)
            obuf = torch.full((n + offset + 1,), float("nan"), dtype=torch.bfloat16, device="cuda")
            out = obuf[offset:offset + n].view(rows, cols)
            rc = cand.call({**placed, "out": out}, {"rows": rows, "cols": cols}, stream)
            torch.cuda.synchronize()
            where = f"{name} {flags} {shape} offset {offset}"
            assert rc == 0, f"{where}: cudaError {rc}"
            cmp = compare(out, ref, workload.tolerance)
            assert cmp.ok, f"{where}: {cmp.reason}"
            assert torch.isnan(obuf[:offset]).all() and torch.isnan(obuf[offset + n]), f"{where}: wrote outside out"
            assert all(torch.equal(placed[k], inputs[k]) for k in inputs), f"{where}: modified an input"
