"""The hand-made version ladder of cumsum (fp32 inclusive scan along rows): naive.cu ->
versions/01..08 -> expert.cu, one optimization mechanism per step.

Checked here without a GPU: the files, their `// klineage-step: mechanism=` headers, the ABI, the
static guard, that each step's signature text appears where its mechanism enters (and stays), that
the detectors see exactly the declared mechanism enter at each step, that the scripted versions walk
goes from the expert to the naive kernel, the workload contract, that the probe shapes reach every
path of the expert, the oracle and the tolerance (serial fp32 passes at 1 x 1M, bf16 shortcuts
fail), and that every rung compiles with nvcc (with 16-byte accesses in the expert). With a GPU
(`requires_cuda`), every rung is also run on the benchmark and probe shapes plus extra edge shapes,
at several input and output offsets, and checked against the oracle on every element.
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
WORKLOAD_DIR = ROOT / "expert_kernels" / "cumsum"
VERSIONS_DIR = WORKLOAD_DIR / "versions"

LADDER = [
    ("01_restrict.cu", "restrict"),
    ("02_launch_bounds.cu", "launch_bounds"),
    ("03_warp_per_row.cu", "warp_per_row"),
    ("04_warp_scan.cu", "warp_scan"),
    ("05_float4.cu", "vector_access"),
    ("06_coarsening.cu", "coarsening"),
    ("07_unroll.cu", "unroll"),
    ("08_block_scan.cu", "block_scan"),
]
EXPERT_ADDS = "reduce_then_scan"
NAMES = [name for name, _ in LADDER]
RUNGS = ["naive.cu", *NAMES, "expert.cu"]
HEADER_RE = re.compile(r"\A// klineage-step: mechanism=([a-z_]+)[ \t]*\n// \S.*\n")

# Live-code text each mechanism brings in, from its step on (the shared-memory scan of step 03 is
# the one mechanism a later step, 04, takes out again).
ENTERS = {
    "restrict": [r"const float\* __restrict__ x, float\* __restrict__ out"],
    "launch_bounds": [r"__launch_bounds__\("],
    "warp_per_row": [r"threadIdx\.x >> 5", r"cumsum_warp_kernel", r"CUMSUM_WARP_BLOCK / 32"],
    "warp_scan": [r"__shfl_up_sync\(FULL_MASK, v, o\)", r"float warp_incl_scan\(float v, int lane\)",
                  r"__shfl_sync\(FULL_MASK, \w+(\[k\])?, 31\)"],
    "vector_access": [r"const float4\*", r"split_row\(", r"store4<VEC_STORE>", r"& 15u\) == 0", r"scan4\("],
    "coarsening": [r"#define CUMSUM_WARP_UNROLL 8", r"float4 v\[UNROLL\];", r"k < UNROLL; \+\+k"],
    "unroll": [r"#pragma unroll"],
    "block_scan": [r"cumsum_block_kernel", r"__syncthreads\(\)", r"CUMSUM_WARP_MAX_COLS", r"block_scan_range<",
                   r"s_tot\[2\]\[UNROLL\]"],
    "reduce_then_scan": [r"cumsum_tile_sum_kernel", r"tile_range\(", r"#define CUMSUM_TARGET_CTAS",
                         r"orow\[s\.head \+ 4 \* qb \+ p\] = sum;"],
}
SPLIT_MACROS = ("CUMSUM_TARGET_CTAS", "CUMSUM_MIN_TILE", "CUMSUM_MAX_SPLIT")


def _rung_source(name: str) -> str:
    return (VERSIONS_DIR / name if name[0].isdigit() else WORKLOAD_DIR / name).read_text()


def _code(source: str) -> str:
    return strip_comments(source)[0]


def _defines(code: str) -> dict[str, str]:
    return dict(re.findall(r"#define (CUMSUM_\w+) (\S+)", code))


@pytest.fixture(scope="module")
def workload():
    return load_workload(WORKLOAD_DIR)


# ---------------------------------------------------------------- files and headers


def test_ladder_files_exist_in_order():
    present = sorted(p.name for p in VERSIONS_DIR.glob("*.cu"))
    assert present == NAMES
    assert not (VERSIONS_DIR / "naive.cu").exists() and not (VERSIONS_DIR / "expert.cu").exists()
    for name in ("naive.cu", "expert.cu", "workload.py"):
        assert (WORKLOAD_DIR / name).is_file()


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
    assert "#include <cuda_runtime.h>" in src
    assert src.count(workload.c_signature) == 1, f"{name}: must export {workload.c_signature}"
    assert re.search(r"<<<[^>]*,\s*0,\s*stream>>>", code), f"{name}: launches not on the stream argument"
    assert len(re.findall(r"<<<", code)) == len(re.findall(r"<<<[^>]*,\s*0,\s*stream>>>", code))
    assert "return cudaGetLastError();" in code
    assert not re.search(r"\batomic\w*\s*\(", code), f"{name}: uses atomics"
    assert not re.search(r"\bstatic\b", code), f"{name}: keeps static state"
    assert not re.search(r"cudaMemset|cudaMalloc|cooperative|this_grid", code), f"{name}: needs no init or scratch"


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
    # 03 scans through shared memory with __syncwarp; 04 replaces it by shuffles
    assert "__syncwarp" in codes[2] and "__shared__" in codes[2] and "__shfl" not in codes[2]
    assert all("__syncwarp" not in c for c in codes[3:])
    assert "__shared__" not in codes[3] and "__shared__" not in codes[6]
    # 06 coarsens without #pragma; 07 adds exactly the four pragmas (shuffle loop, three slice loops)
    assert codes[5].count("#pragma") == 0 and codes[6].count("#pragma unroll") == 4
    # the expert's warp path is 08's, unchanged
    warp = lambda src: src[src.index("#define FULL_MASK"):src.index("// ---------------- block-wide pieces")]
    assert warp(_rung_source("08_block_scan.cu")) == warp(_rung_source("expert.cu"))


def test_block_scan_is_expert_without_the_split():
    v08 = _code(_rung_source("08_block_scan.cu"))
    expert = _code(_rung_source("expert.cu"))
    for pat in ENTERS[EXPERT_ADDS]:
        assert re.search(pat, expert), f"expert.cu no longer has {pat!r}: update the ladder"
        assert not re.search(pat, v08), f"08 still splits rows ({pat!r})"
    want = {k: v for k, v in _defines(expert).items() if k not in SPLIT_MACROS}
    assert _defines(v08) == want


# ---------------------------------------------------------------- detectors and the versions walk


def test_detectors_see_only_the_declared_mechanism_enter():
    from klineage.mechanisms import detect_all, registry

    known = {m.NAME for m in registry().values() if m.DETECTABLE}
    for declared in ("warp_per_row", "warp_scan", "block_scan", "reduce_then_scan"):
        assert declared in registry() and declared not in known
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
        assert set(before) <= set(after), f"{RUNGS[i + 1]} loses {set(before) - set(after)}"
        added = set(after) - set(before)
        if mech in known:
            assert added <= {mech} and after.get(mech, 0) > before.get(mech, 0), (RUNGS[i + 1], before, after)
        else:
            assert not added, (RUNGS[i + 1], added)
    # a shuffle scan is no shuffle reduction, and the warp totals are no staged operand
    assert set(kinds[-1]) == {"restrict", "launch_bounds", "vector_access", "coarsening", "unroll"}


def test_versions_ladder_walks_to_the_naive_kernel(workload):
    assert_versions_walk(workload, WORKLOAD_DIR, LADDER, EXPERT_ADDS)


# ---------------------------------------------------------------- the workload contract


def test_workload_contract(workload):
    assert workload.name == "cumsum" and workload.entry == "cumsum" and workload.dtypes == ("float32",)
    assert workload.input_names == ("x",) and workload.output_names == ("out",)
    assert [a.name for a in workload.args] == ["x", "out", "rows", "cols"]
    assert [dict(s) for s in workload.benchmark_cases] == [{"rows": 16384, "cols": 4096}, {"rows": 1, "cols": 1048576}]
    for _, s in workload.all_shapes():
        assert workload.bytes_moved(s) == 2 * s["rows"] * s["cols"] * 4
        assert workload.flops(s) == s["rows"] * s["cols"]
        assert workload.outputs(s) == {"out": ((s["rows"], s["cols"]), "float32")}
        assert workload.scalars(s) == {"rows": s["rows"], "cols": s["cols"]}
    assert vars(workload.tolerance) == {"rtol": 1e-4, "atol": 1e-5, "min_matched": 0.999}
    assert "torch.cumsum" in workload.vendor_name and not workload.stateful


def _expert_path(rows: int, cols: int) -> tuple[str, int]:
    """The expert's host choice for a shape, from its own default macros: (path, tiles per row)."""
    d = {k: int(v) for k, v in _defines(_code(_rung_source("expert.cu"))).items()}
    if cols <= d["CUMSUM_WARP_MAX_COLS"]:
        return "warp", 1
    split = min(-(-d["CUMSUM_TARGET_CTAS"] // rows), d["CUMSUM_MAX_SPLIT"], ((cols - 3) // 4) // (d["CUMSUM_MIN_TILE"] // 4))
    split = max(split, 1)
    return ("split" if split > 1 else "block"), split


def test_probe_shapes_stress_the_kernels_assumptions(workload):
    probes = [dict(s) for s in workload.probe_shapes]
    assert {"rows": 1, "cols": 1} in probes
    assert {1, 3} <= {workload.pointer_offset(s) for s in probes}, "misaligned bases (offsets 1 and 3)"
    assert any(s["cols"] % 4 for s in probes) and any(s["cols"] % 4 == 1 for s in probes)
    assert any(s["cols"] < 32 for s in probes), "rows shorter than one warp step"
    assert any(s["rows"] > 1 and s["cols"] % 128 and s["cols"] > 1024 for s in probes), "partial warp steps"
    # every path of the expert is probed, the warp and the split path also at a misaligned base
    paths = {(_expert_path(s["rows"], s["cols"])[0], bool(workload.pointer_offset(s))) for s in probes}
    assert {("warp", False), ("warp", True), ("block", False), ("split", False), ("split", True)} <= paths
    for s in probes:
        path, split = _expert_path(s["rows"], s["cols"])
        if path == "split":  # tiles of unequal length, and each tile's slots fit in it
            assert ((s["cols"] - 3) // 4) // split * 4 >= split
    assert any(_expert_path(s["rows"], s["cols"])[0] == "split" and s["rows"] == 1 and ((s["cols"] - 3) // 4)
               % _expert_path(s["rows"], s["cols"])[1] for s in probes), "a long row split into uneven tiles"
    # the benchmark cases take the warp path and the split path
    assert [_expert_path(s["rows"], s["cols"])[0] for s in workload.benchmark_cases] == ["warp", "split"]
    # the whole probe set is small (it runs in well under a second on a GPU, for every rung)
    assert sum(s["rows"] * s["cols"] for s in probes) < 8_000_000


# ---------------------------------------------------------------- the oracle and the tolerance


def test_reference_is_the_float64_cumsum(workload):
    import torch

    from klineage.gate.correctness import compare, negative_controls

    for shape in [{"rows": 1, "cols": 1}, {"rows": 3, "cols": 5}, {"rows": 7, "cols": 4097}, {"rows": 1000, "cols": 33}]:
        inputs = workload.make_inputs(shape, seed=3)
        x = inputs["x"]
        assert x.shape == (shape["rows"], shape["cols"]) and x.dtype == torch.float32
        ref = workload.reference(inputs, shape)["out"]
        assert ref.dtype == torch.float64 and tuple(ref.shape) == tuple(x.shape)
        for r in range(0, shape["rows"], max(1, shape["rows"] // 5)):
            s = 0.0
            for c in range(shape["cols"]):
                s += float(x[r, c])
                if c % max(1, shape["cols"] // 9) == 0 or c == shape["cols"] - 1:
                    assert abs(ref[r, c].item() - s) <= 1e-9 * max(1.0, abs(s))
        vend = workload.vendor(inputs, shape)["out"]
        assert vend.dtype == torch.float32 and compare(vend, ref, workload.tolerance).ok
        if shape["cols"] > 1:
            controls = negative_controls(workload, inputs, {"out": ref}, shape)
            assert controls["zeros"]["rejected"] and controls["copy_of_input"]["rejected"], controls
            # an exclusive scan (every element off by one position) fails
            excl = torch.cat([torch.zeros_like(ref[:, :1]), ref[:, :-1]], dim=1)
            assert not compare(excl, ref, workload.tolerance).ok


def _check(workload, out, ref):
    from klineage.gate.correctness import compare

    return compare(out, ref, workload.tolerance)


def test_tolerance_admits_serial_fp32_and_rejects_bf16(workload):
    import numpy as np
    import torch

    def bf16(t):
        return t.to(torch.bfloat16).to(torch.float32)

    # The least accurate fp32 order, one running sum per row, passes on every element of the long
    # benchmark row (and at the benchmark width) for several seeds.
    for shape in ({"rows": 1, "cols": 1048576}, {"rows": 64, "cols": 4096}, {"rows": 2, "cols": 65537}):
        for seed in (1, 2, 3):
            x = workload.make_inputs(shape, seed)["x"]
            ref = workload.reference({"x": x}, shape)["out"]
            serial = torch.from_numpy(np.cumsum(x.numpy(), axis=1, dtype=np.float32))
            c = _check(workload, serial, ref)
            assert c.ok and c.matched_fraction == 1.0, (shape, seed, c.reason)
    # bf16 outputs and a bf16 running sum fail everywhere; bf16-rounded inputs fail at short rows
    for shape in ({"rows": 1, "cols": 1048576}, {"rows": 64, "cols": 4096}, {"rows": 1000, "cols": 33}):
        x = workload.make_inputs(shape, 1)["x"]
        ref = workload.reference({"x": x}, shape)["out"]
        serial = torch.from_numpy(np.cumsum(x.numpy(), axis=1, dtype=np.float32))
        assert not _check(workload, bf16(serial), ref).ok, shape
        if shape["cols"] <= 4096:
            assert not _check(workload, torch.cumsum(bf16(x).double(), dim=1), ref).ok, shape
            acc = torch.zeros(shape["rows"], dtype=torch.bfloat16)
            res = torch.empty_like(x)
            xb = x.to(torch.bfloat16)
            for c in range(shape["cols"]):
                acc = acc + xb[:, c]
                res[:, c] = acc.float()
            assert not _check(workload, res, ref).ok, shape


def test_make_inputs_deterministic_and_seed_dependent(workload):
    shape = {"rows": 5, "cols": 900}
    a1, a2, b = (workload.make_inputs(shape, 1)["x"], workload.make_inputs(shape, 1)["x"],
                 workload.make_inputs(shape, 2)["x"])
    assert (a1 == a2).all() and not (a1 == b).all()
    assert 0.15 < float(a1.mean()) < 0.35, "a non-zero mean, so the prefix sums grow along the row"


# ---------------------------------------------------------------- nvcc


@pytest.mark.nvcc
@pytest.mark.parametrize("name", RUNGS)
def test_compiles(name):
    from klineage.gate.compile import compile_kernel

    res = compile_kernel(_rung_source(name))
    assert res.ok, f"{name}: {res.error_message}\n{res.log}"
    assert res.resources, f"{name}: no ptxas resource report"
    assert not res.spills, f"{name}: spills registers"


# Configurations the GPU test also runs: other coarsening factors and block sizes, and every row
# forced onto the long-row paths (WARP_MAX_COLS=0), with tiny tiles so that short rows split too.
EXPERT_FLAGS = [
    ("-DCUMSUM_WARP_UNROLL=4", "-DCUMSUM_UNROLL=2"),
    ("-DCUMSUM_BLOCK=512", "-DCUMSUM_WARP_BLOCK=128", "-DCUMSUM_TARGET_CTAS=1056", "-DCUMSUM_MIN_TILE=1024"),
    ("-DCUMSUM_WARP_MAX_COLS=0",),
    ("-DCUMSUM_WARP_MAX_COLS=0", "-DCUMSUM_MIN_TILE=64", "-DCUMSUM_MAX_SPLIT=64", "-DCUMSUM_TARGET_CTAS=100000"),
]


@pytest.mark.nvcc
@pytest.mark.parametrize("flags", EXPERT_FLAGS, ids=["unroll4-2", "block512", "no-warp-path", "tiny-tiles"])
def test_expert_configurations_compile(flags):
    from klineage.gate.compile import compile_kernel

    res = compile_kernel(_rung_source("expert.cu"), extra_flags=flags)
    assert res.ok, f"{flags}: {res.error_message}\n{res.log}"
    assert not res.spills, f"{flags}: spills registers"


@pytest.mark.nvcc
def test_expert_moves_16_byte_vectors(tmp_path):
    src = tmp_path / "expert.cu"
    src.write_text(_rung_source("expert.cu"))
    ptx = tmp_path / "expert.ptx"
    subprocess.run(["nvcc", "-O3", "-ptx", "-gencode=arch=compute_90a,code=sm_90a", str(src), "-o", str(ptx)],
                   check=True, capture_output=True, timeout=120)
    text = ptx.read_text()
    entries = {m.group(1): m.group(2) for m in re.finditer(r"\.entry (\w+)\((.*?)^}", text, re.S | re.M)}
    by_name = lambda part: next(body for name, body in entries.items() if part in name)
    warp_vec = by_name("cumsum_warp_kernelILi256ELi8ELb1")   # VEC_STORE = true
    block_vec = by_name("cumsum_block_kernelILi256ELi4ELb1")
    # every one of the UNROLL float4s of a step is one 16-byte load and one 16-byte store
    assert len(re.findall(r"ld\.global\.nc\.v4\.f32", warp_vec)) == 8
    assert len(re.findall(r"st\.global\.v4\.f32", warp_vec)) == 8
    assert len(re.findall(r"ld\.global\.nc\.v4\.f32", block_vec)) == 4
    assert len(re.findall(r"st\.global\.v4\.f32", block_vec)) == 4
    assert "ld.local" not in text and "st.local" not in text


# ---------------------------------------------------------------- GPU: every rung against the oracle

EXTRA_SHAPES = [
    {"rows": 9, "cols": 2}, {"rows": 5, "cols": 3}, {"rows": 4, "cols": 128}, {"rows": 3, "cols": 1024},
    {"rows": 3, "cols": 1025}, {"rows": 2, "cols": 8192}, {"rows": 2, "cols": 8193}, {"rows": 3, "cols": 8195},
    {"rows": 263, "cols": 9000}, {"rows": 264, "cols": 9000}, {"rows": 40, "cols": 100003},
    {"rows": 3, "cols": 1 << 20}, {"rows": 1, "cols": (1 << 21) + 5},
]
VARIANTS = [(n, ()) for n in RUNGS] + [("expert.cu", f) for f in EXPERT_FLAGS]
# (x offset, out offset) in elements: equal offsets as the gate passes them, and x and out in
# different 16-byte phases (the scalar-store fallback)
OFFSETS = [(0, 0), (1, 1), (2, 2), (3, 3), (1, 0), (0, 3)]


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
    strict = type(workload.tolerance)(workload.tolerance.rtol, workload.tolerance.atol, 1.0)
    shapes = [s for _, s in workload.all_shapes()] + EXTRA_SHAPES
    for shape in shapes:
        rows, cols = shape["rows"], shape["cols"]
        n = rows * cols
        x = workload.make_inputs(shape, seed=7, device="cuda")["x"]
        ref = workload.reference({"x": x}, shape)["out"]
        offsets = OFFSETS if n <= 1 << 22 else [(0, 0), (3, 3)]
        if workload.pointer_offset(shape):
            offsets = [(workload.pointer_offset(shape),) * 2]
        for xo, oo in offsets:
            xbuf = torch.empty(n + xo, dtype=torch.float32, device="cuda")
            xs = xbuf[xo:].view(rows, cols)
            xs.copy_(x)
            obuf = torch.full((n + oo + 1,), float("nan"), dtype=torch.float32, device="cuda")
            out = obuf[oo:oo + n].view(rows, cols)
            rc = cand.call({"x": xs, "out": out}, {"rows": rows, "cols": cols}, stream)
            torch.cuda.synchronize()
            where = f"{name} {flags} {shape} offsets x {xo} out {oo}"
            assert rc == 0, f"{where}: cudaError {rc}"
            cmp = compare(out, ref, strict)  # every element, so a wrong tail element shows too
            assert cmp.ok, f"{where}: {cmp.reason} first bad {cmp.first_bad_index}"
            assert torch.isnan(obuf[:oo]).all() and torch.isnan(obuf[oo + n]), f"{where}: wrote outside out"
            assert torch.equal(xs, x), f"{where}: modified x"
            if name == "expert.cu":  # fixed summation order: the same bits on a second call
                again = out.clone()
                out.fill_(float("nan"))
                assert cand.call({"x": xs, "out": out}, {"rows": rows, "cols": cols}, stream) == 0
                torch.cuda.synchronize()
                assert torch.equal(out, again), f"{where}: not deterministic"
