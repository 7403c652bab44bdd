"""The hand-made version ladders of the two transpose workloads (fp32 `transpose`, bf16
`transpose_bf16`): naive.cu -> versions/01..07 -> expert.cu, one optimization mechanism per step.

Checked here without a GPU: the files, their `// klineage-step: mechanism=` headers, the ABI, the
static guard, that each step's signature text appears where its mechanism enters (and stays), that
the detectors see exactly the declared mechanism enter at each step, that the scripted versions walk
goes from the expert to the naive kernel, the workload contract and its oracle on small shapes, and
that every rung compiles with nvcc (with 16-byte global accesses in the expert). With a GPU
(`requires_cuda`), every rung is also run on the benchmark and probe shapes plus extra edge shapes
at several pointer offsets, and checked bit-exactly against the oracle.
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
DIRS = {name: ROOT / "expert_kernels" / name for name in ("transpose", "transpose_bf16")}
WORKLOADS = list(DIRS)
# elements per 16-byte vector, vector type of the vector kernel
VEC = {"transpose": (4, "float4"), "transpose_bf16": (8, "uint4")}
ELEM = {"transpose": 4, "transpose_bf16": 2}

LADDER = [
    ("01_restrict.cu", "restrict"),
    ("02_tiled_transpose.cu", "tiled_transpose"),
    ("03_smem_padding.cu", "smem_padding"),
    ("04_coarsening.cu", "coarsening"),
    ("05_unroll.cu", "unroll"),
    ("06_launch_bounds.cu", "launch_bounds"),
    ("07_vector_access.cu", "vector_access"),
]
EXPERT_ADDS = "cache_hint"
NAMES = [name for name, _ in LADDER]
RUNGS = ["naive.cu", *NAMES, "expert.cu"]
HEADER_RE = re.compile(r"\A// klineage-step: mechanism=([a-z_]+)[ \t]*\n// \S.*\n")

# Live-code text each mechanism brings in, from its step on (kept up to and including the expert).
ENTERS = {
    "restrict": [r"__restrict__ x, \w+( \w+)?\* __restrict__ out"],
    "tiled_transpose": [r"__shared__ [\w ]+ tile\[kTile\]\[", r"__syncthreads\(\);", r"int tiles_c"],
    "smem_padding": [r"tile\[kTile\]\[kTile \+ TRANSPOSE_PAD\]", r"#define TRANSPOSE_PAD \d"],
    "coarsening": [r"#define TRANSPOSE_ITEMS_PER_THREAD 4", r"v\[TRANSPOSE_ITEMS_PER_THREAD\];",
                   r"k < TRANSPOSE_ITEMS_PER_THREAD; \+\+k"],
    "unroll": [r"#pragma unroll"],
    "launch_bounds": [r"__launch_bounds__\(kThreads\)"],
    "vector_access": [r"<VEC>", r"& 15u\) == 0", r"transpose_vec\d_kernel"],
    "cache_hint": [r"__ldg\("],
}


def _dir(wl: str) -> Path:
    return DIRS[wl]


def _rung_source(wl: str, name: str) -> str:
    d = _dir(wl)
    return (d / "versions" / name if name[0].isdigit() else d / name).read_text()


def _code(source: str) -> str:
    return strip_comments(source)[0]


def _pats(wl: str, mech: str) -> list[str]:
    return [p.replace("<VEC>", VEC[wl][1]) for p in ENTERS[mech]]


@pytest.fixture(scope="module", params=WORKLOADS)
def wl_name(request):
    return request.param


@pytest.fixture(scope="module")
def workload(wl_name):
    return load_workload(_dir(wl_name))


# ---------------------------------------------------------------- files and headers


def test_ladder_files_exist_in_order(wl_name):
    d = _dir(wl_name)
    present = sorted(p.name for p in (d / "versions").glob("*.cu"))
    assert present == NAMES
    assert (d / "naive.cu").is_file() and (d / "expert.cu").is_file() and (d / "workload.py").is_file()


def test_headers_name_the_mechanisms_in_order(wl_name):
    found = []
    for name in NAMES:
        m = HEADER_RE.match(_rung_source(wl_name, name))
        assert m, f"{name}: no '// klineage-step: mechanism=<name>' header followed by a description line"
        found.append(m.group(1))
    assert found == [mech for _, mech in LADDER]
    meta = tomllib.loads((_dir(wl_name) / "versions" / "ladder.toml").read_text())
    assert meta["expert_adds"] == EXPERT_ADDS and meta["description"]
    for name in ("naive.cu", "expert.cu"):
        assert not HEADER_RE.match(_rung_source(wl_name, name)), f"{name} must not declare a step"


@pytest.mark.parametrize("name", RUNGS)
def test_abi_and_contract(name, wl_name, workload):
    src = _rung_source(wl_name, name)
    code = _code(src)
    assert "#include <cuda_runtime.h>" in src
    assert src.count(workload.c_signature) == 1, f"{name}: must export {workload.c_signature}"
    assert re.search(r"<<<[^>]*,\s*0,\s*stream>>>", code), f"{name}: launches not on the stream argument"
    assert len(re.findall(r"<<<", code)) == len(re.findall(r"<<<[^>]*,\s*0,\s*stream>>>", code))
    assert "return cudaGetLastError();" in code
    assert not re.search(r"\batomic\w*\s*\(", code), f"{name}: uses atomics"
    assert not re.search(r"\bstatic\b", code), f"{name}: keeps static state"


@pytest.mark.parametrize("name", RUNGS)
def test_static_guard(name, wl_name, workload):
    res = check_source(_rung_source(wl_name, name), workload)
    assert res.ok, f"{name}: {res.summary}"


def test_each_mechanism_enters_at_its_step(wl_name):
    mechs = [mech for _, mech in LADDER] + [EXPERT_ADDS]
    names = NAMES + ["expert.cu"]
    codes = [_code(_rung_source(wl_name, n)) for n in names]
    naive = _code(_rung_source(wl_name, "naive.cu"))
    for i, mech in enumerate(mechs):
        for pat in _pats(wl_name, mech):
            before = [naive] + codes[:i]
            assert not any(re.search(pat, c) for c in before), f"{pat!r} appears before step {names[i]}"
            assert re.search(pat, codes[i]), f"{names[i]}: {pat!r} missing"
            for later_name, later in zip(names[i + 1:], codes[i + 1:]):
                assert re.search(pat, later), f"{later_name} lost {mech} ({pat!r})"
    # 04 coarsens without #pragma; 05 adds exactly the three pragmas of the item loops
    assert codes[3].count("#pragma") == 0 and codes[4].count("#pragma unroll") == 3
    # 02 stages through an unpadded tile, one element per thread
    assert "TRANSPOSE_PAD" not in codes[1] and "kThreads = kTile * kTile;" in codes[1]


def test_expert_is_the_last_version_with_cache_hints(wl_name):
    """Apart from the load/store helpers and their modes, expert.cu is 07 verbatim."""
    v07 = _code(_rung_source(wl_name, "07_vector_access.cu"))
    expert = _code(_rung_source(wl_name, "expert.cu"))
    defines = lambda c: dict(re.findall(r"#define (TRANSPOSE_\w+) (\S+)", c))
    want = {k: v for k, v in defines(expert).items() if k not in ("TRANSPOSE_LOAD_MODE", "TRANSPOSE_STORE_MODE")}
    assert defines(v07) == want
    assert "__ldg(" not in v07 and "__ldcs(" not in v07 and "__stcs(" not in v07
    kernels = lambda c: sorted(re.findall(r"__global__ void __launch_bounds__\(kThreads\)\s*(\w+)\(", c))
    assert kernels(expert) == kernels(v07) and len(kernels(v07)) == 2


# ---------------------------------------------------------------- detectors and the versions walk


def test_detectors_see_only_the_declared_mechanism_enter(wl_name):
    from klineage.mechanisms import detect_all, registry

    known = {m.NAME for m in registry().values() if m.DETECTABLE}
    assert "tiled_transpose" in registry() and "tiled_transpose" not in known
    kinds = []
    for name in RUNGS:
        counts: dict[str, int] = {}
        for f in detect_all(_rung_source(wl_name, name)):
            counts[f.mechanism] = counts.get(f.mechanism, 0) + 1
        kinds.append(counts)
    assert kinds[0] == {}, f"naive.cu must have no detected mechanism, has {kinds[0]}"
    steps = [mech for _, mech in LADDER] + [EXPERT_ADDS]
    for i, mech in enumerate(steps):
        before, after = kinds[i], kinds[i + 1]
        assert set(before) <= set(after), f"{RUNGS[i + 1]} loses {set(before) - set(after)}"
        added = set(after) - set(before)
        if mech in known:
            assert added <= {mech} and after.get(mech, 0) > before.get(mech, 0), (RUNGS[i + 1], before, after)
        else:
            assert not added, (RUNGS[i + 1], added)
    assert set(kinds[-1]) == {"restrict", "smem_padding", "coarsening", "unroll", "launch_bounds",
                              "vector_access", "cache_hint"}


def test_versions_ladder_walks_to_the_naive_kernel(wl_name, workload):
    assert_versions_walk(workload, _dir(wl_name), LADDER, EXPERT_ADDS)


# ---------------------------------------------------------------- the workload contract and oracle


def test_workload_contract(wl_name, workload):
    assert workload.name == wl_name and workload.entry == wl_name
    assert workload.dtypes == (("float32",) if wl_name == "transpose" else ("bfloat16",))
    assert workload.output_names == ("out",) and workload.input_names == ("x",)
    assert [dict(s) for s in workload.benchmark_cases] == [{"rows": 8192, "cols": 8192}, {"rows": 4096, "cols": 16384}]
    for _, s in workload.all_shapes():
        assert workload.bytes_moved(s) == 2 * s["rows"] * s["cols"] * ELEM[wl_name]
        assert workload.flops(s) == 0
        assert workload.outputs(s)["out"][0] == (s["cols"], s["rows"])
        assert workload.scalars(s) == {"rows": s["rows"], "cols": s["cols"]}
    assert workload.tolerance.min_matched == 1.0
    assert "t().contiguous()" in workload.vendor_name


def test_probe_shapes_stress_the_kernels_assumptions(wl_name, workload):
    vec, _ = VEC[wl_name]
    probes = [dict(s) for s in workload.probe_shapes]
    offsets = {workload.pointer_offset(s) for s in probes}
    assert {1, 3} <= offsets, "misaligned bases (offsets 1 and 3) must be probed"
    assert any(o and (o * ELEM[wl_name]) % 16 == 0 for o in offsets), "a 16-byte aligned, non-256-byte base"
    assert {"rows": 1, "cols": 1} in probes
    assert any(s["rows"] == 1 and s["cols"] > 1 for s in probes)
    assert any(s["cols"] == 1 and s["rows"] > 1 for s in probes)
    aligned = [s for s in probes if s["rows"] % vec == 0 and s["cols"] % vec == 0 and not workload.pointer_offset(s)]
    assert any(s["rows"] % 64 and s["cols"] % 64 for s in aligned), "a vector-path shape with partial tiles"
    assert any(s["rows"] % vec for s in probes) and any(s["cols"] % vec for s in probes)
    assert any(s["rows"] % 32 and s["cols"] % 32 for s in probes), "sizes that are no multiple of the tile"
    # the whole probe set is small (it runs in well under a second on a GPU, for every rung)
    assert sum(s["rows"] * s["cols"] for s in probes) < 4_000_000


def test_reference_is_the_transpose_in_float64(wl_name, workload):
    import torch

    from klineage.gate.correctness import compare, negative_controls

    for shape in [{"rows": 1, "cols": 1}, {"rows": 3, "cols": 5}, {"rows": 33, "cols": 65}, {"rows": 68, "cols": 132}]:
        inputs = workload.make_inputs(shape, seed=3)
        x = inputs["x"]
        assert x.shape == (shape["rows"], shape["cols"])
        assert x.dtype == (torch.float32 if wl_name == "transpose" else torch.bfloat16)
        ref = workload.reference(inputs, shape)["out"]
        assert ref.dtype == torch.float64 and ref.is_contiguous() and tuple(ref.shape) == (shape["cols"], shape["rows"])
        for r in range(shape["rows"]):
            for c in range(0, shape["cols"], max(1, shape["cols"] // 7)):
                assert ref[c, r].item() == x[r, c].double().item()
        vend = workload.vendor(inputs, shape)["out"]
        assert vend.dtype == x.dtype and vend.is_contiguous()
        assert compare(vend, ref, workload.tolerance).ok
        if shape["rows"] > 1 and shape["cols"] > 1:
            controls = negative_controls(workload, inputs, {"out": ref}, shape)
            assert controls["zeros"]["rejected"] and controls["copy_of_input"]["rejected"], controls
            # a single misplaced element fails
            bad = ref.clone()
            bad[0, 0], bad[0, 1] = ref[0, 1], ref[0, 0]
            if ref[0, 0] != ref[0, 1]:
                assert not compare(bad, ref, workload.tolerance).ok


def test_make_inputs_deterministic_and_seed_dependent(workload):
    shape = {"rows": 5, "cols": 9}
    a1, a2 = workload.make_inputs(shape, 1)["x"], workload.make_inputs(shape, 1)["x"]
    b = workload.make_inputs(shape, 2)["x"]
    assert (a1 == a2).all() and not (a1 == b).all()
    assert a1.unique().numel() >= 0.9 * a1.numel(), "(nearly) distinct values, so a misplaced element shows"


# ---------------------------------------------------------------- nvcc


@pytest.mark.nvcc
@pytest.mark.parametrize("name", RUNGS)
def test_compiles(name, wl_name):
    from klineage.gate.compile import compile_kernel

    res = compile_kernel(_rung_source(wl_name, name))
    assert res.ok, f"{name}: {res.error_message}\n{res.log}"
    assert res.resources, f"{name}: no ptxas resource report"
    assert not res.spills, f"{name}: spills registers"


VARIANT_FLAGS = [("-DTRANSPOSE_ITEMS_PER_THREAD=1",), ("-DTRANSPOSE_ITEMS_PER_THREAD=8",),
                 ("-DTRANSPOSE_LOAD_MODE=1",), ("-DTRANSPOSE_STORE_MODE=1",)]


COMPILE_VARIANTS = [("-DTRANSPOSE_ITEMS_PER_THREAD=1",),
                    ("-DTRANSPOSE_ITEMS_PER_THREAD=8", "-DTRANSPOSE_LOAD_MODE=1", "-DTRANSPOSE_STORE_MODE=1")]


@pytest.mark.nvcc
@pytest.mark.parametrize("flags", COMPILE_VARIANTS, ids=["items1", "items8-evict-first"])
def test_expert_configurations_compile(flags, wl_name):
    from klineage.gate.compile import compile_kernel

    res = compile_kernel(_rung_source(wl_name, "expert.cu"), extra_flags=flags)
    assert res.ok, f"{flags}: {res.error_message}\n{res.log}"


@pytest.mark.nvcc
def test_expert_moves_16_byte_vectors(wl_name, tmp_path):
    src = tmp_path / "expert.cu"
    src.write_text(_rung_source(wl_name, "expert.cu"))
    ptx = tmp_path / "expert.ptx"
    subprocess.run(["nvcc", "-O3", "-ptx", "-gencode=arch=compute_90a,code=sm_90a", str(src), "-o", str(ptx)],
                   check=True, capture_output=True, timeout=120)
    text = ptx.read_text()
    kind = "f32" if wl_name == "transpose" else "u32"
    items = 4
    assert len(re.findall(rf"ld\.global\.nc\.v4\.{kind}", text)) == items, "16-byte read-only loads of x"
    assert len(re.findall(rf"st\.global\.v4\.{kind}", text)) == items, "16-byte stores to out"
    assert "ld.local" not in text and "st.local" not in text


# ---------------------------------------------------------------- GPU: every rung against the oracle

EXTRA_SHAPES = [
    {"rows": 2, "cols": 1}, {"rows": 1, "cols": 2}, {"rows": 31, "cols": 33}, {"rows": 32, "cols": 32},
    {"rows": 8, "cols": 16}, {"rows": 16, "cols": 8}, {"rows": 64, "cols": 192}, {"rows": 256, "cols": 136},
    {"rows": 264, "cols": 72}, {"rows": 1000, "cols": 1000}, {"rows": 4096, "cols": 8}, {"rows": 8, "cols": 4096},
    {"rows": 3000, "cols": 5000},
]
VARIANTS = [(n, ()) for n in RUNGS] + [("expert.cu", f) for f in VARIANT_FLAGS]


@pytest.mark.requires_cuda
@pytest.mark.nvcc
@pytest.mark.parametrize("name,flags", VARIANTS, ids=[f"{n}{''.join(f)}" for n, f in VARIANTS])
def test_rung_matches_oracle_on_gpu(name, flags, wl_name, workload):
    import torch

    from klineage.gate.compile import compile_kernel
    from klineage.gate.correctness import compare
    from klineage.gate.worker import Candidate

    res = compile_kernel(_rung_source(wl_name, name), extra_flags=flags)
    assert res.ok, res.log
    cand = Candidate(res.so_path, workload)
    stream = torch.cuda.current_stream()
    dtype = torch.float32 if wl_name == "transpose" else torch.bfloat16
    shapes = [s for _, s in workload.all_shapes()] + EXTRA_SHAPES
    for shape in shapes:
        rows, cols = shape["rows"], shape["cols"]
        n = rows * cols
        x = workload.make_inputs(shape, seed=7, device="cuda")["x"]
        ref = workload.reference({"x": x}, shape)["out"]
        offsets = (0, 1, 2, 3, 4, 8) if n <= 1 << 22 else (0,)
        if workload.pointer_offset(shape):
            offsets = (workload.pointer_offset(shape),)
        for offset in offsets:
            xbuf = torch.empty(n + offset, dtype=dtype, device="cuda")
            xs = xbuf[offset:].view(rows, cols)
            xs.copy_(x)
            obuf = torch.full((n + offset + 1,), float("nan"), dtype=dtype, device="cuda")
            out = obuf[offset:offset + n].view(cols, rows)
            rc = cand.call({"x": xs, "out": out}, {"rows": rows, "cols": cols}, stream)
            torch.cuda.synchronize()
            where = f"{name} {flags} {shape} offset {offset}"
            assert rc == 0, f"{where}: cudaError {rc}"
            assert torch.equal(out, x.t()), f"{where}: {compare(out, ref, workload.tolerance).reason}"
            assert compare(out, ref, workload.tolerance).ok, where
            assert torch.isnan(obuf[:offset]).all() and torch.isnan(obuf[offset + n]), f"{where}: wrote outside out"
            assert torch.equal(xs, x), f"{where}: modified x"
