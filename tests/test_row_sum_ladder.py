"""The hand-made version ladder of row_sum: naive.cu -> versions/01..09 -> expert.cu, one
optimization mechanism per step.

Checked here without a GPU: the files, their `// klineage-step: mechanism=` headers, the ABI, the
static guard, that each step's signature text appears where its mechanism enters (and stays), and
that every version compiles with nvcc. With a GPU (`requires_cuda`), every rung is also run on the
benchmark and probe shapes plus extra edge shapes and checked against the workload's oracle.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from klineage.gate.guard import check_source, strip_comments
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD_DIR = ROOT / "expert_kernels" / "row_sum"
VERSIONS_DIR = WORKLOAD_DIR / "versions"

LADDER = [
    ("01_restrict.cu", "restrict"),
    ("02_ldg.cu", "cache_hint"),
    ("03_launch_bounds.cu", "launch_bounds"),
    ("04_warp_per_row.cu", "warp_per_row"),
    ("05_warp_shuffle.cu", "warp_reduction"),
    ("06_float4.cu", "vector_access"),
    ("07_ilp.cu", "coarsening"),
    ("08_unroll.cu", "unroll"),
    ("09_block_per_row.cu", "block_per_row"),
]
NAMES = [name for name, _ in LADDER]
HEADER_RE = re.compile(r"\A// klineage-step: mechanism=([a-z_]+)[ \t]*\n// \S.*\n")

# Live-code text each mechanism brings in, from its step on (the shared-memory tree of step 04 is
# the one mechanism a later step, 05, takes out again).
ENTERS = {
    "restrict": [r"const float\* __restrict__ x, float\* __restrict__ out"],
    "cache_hint": [r"__ldg\("],
    "launch_bounds": [r"__launch_bounds__\("],
    "warp_per_row": [r"threadIdx\.x >> 5", r"if \(lane == 0\) out\[r\]"],
    "warp_reduction": [r"__shfl_xor_sync\(0xffffffffu, v, o\)", r"float warp_sum\(float v\)"],
    "vector_access": [r"const float4\*", r"split_row\(", r"RS_LOAD4\("],
    "coarsening": [r"template <int UNROLL>", r"#define ROW_SUM_WARP_UNROLL 8"],
    "unroll": [r"#pragma unroll"],
    "block_per_row": [r"row_sum_block_kernel", r"__syncthreads\(\)", r"ROW_SUM_WARP_MAX_COLS"],
}
CLUSTER = [r"this_cluster\s*\(", r"map_shared_rank", r"cudaLaunchKernelEx", r"cluster_group"]


def _source(name: str) -> str:
    return (VERSIONS_DIR / name).read_text()


def _code(source: str) -> str:
    return strip_comments(source)[0]


@pytest.fixture(scope="module")
def workload():
    return load_workload(WORKLOAD_DIR)


# ---------------------------------------------------------------- files and headers


def test_ladder_files_exist_in_order():
    present = sorted(p.name for p in VERSIONS_DIR.glob("*.cu"))
    assert present == NAMES
    assert not (VERSIONS_DIR / "naive.cu").exists() and not (VERSIONS_DIR / "expert.cu").exists()
    assert (WORKLOAD_DIR / "naive.cu").is_file() and (WORKLOAD_DIR / "expert.cu").is_file()


def test_headers_name_the_mechanisms_in_order():
    found = []
    for name in NAMES:
        m = HEADER_RE.match(_source(name))
        assert m, f"{name}: no '// klineage-step: mechanism=<name>' header followed by a description line"
        found.append(m.group(1))
    assert found == [mech for _, mech in LADDER]


@pytest.mark.parametrize("name", NAMES)
def test_abi_and_contract(name, workload):
    src = _source(name)
    code = _code(src)
    assert "#include <cuda_runtime.h>" in src
    assert src.count(workload.c_signature) == 1, f"{name}: must export {workload.c_signature}"
    assert re.search(r"<<<[^>]*,\s*0,\s*stream>>>", code), f"{name}: launches not on the stream argument"
    assert "return cudaGetLastError();" in code
    assert not re.search(r"\batomic\w*\s*\(", code), f"{name}: uses atomics"
    assert not re.search(r"\bstatic\b", code), f"{name}: keeps static state"


@pytest.mark.parametrize("name", NAMES)
def test_static_guard(name, workload):
    res = check_source(_source(name), workload)
    assert res.ok, f"{name}: {res.summary}"


def test_each_mechanism_enters_at_its_step():
    mechs = [mech for _, mech in LADDER]
    codes = [_code(_source(n)) for n in NAMES]
    naive = _code((WORKLOAD_DIR / "naive.cu").read_text())
    for i, mech in enumerate(mechs):
        for pat in ENTERS[mech]:
            before = [naive] + codes[:i]
            assert not any(re.search(pat, c) for c in before), f"{pat!r} appears before step {NAMES[i]}"
            assert re.search(pat, codes[i]), f"{NAMES[i]}: {pat!r} missing"
    # kept from their step on, up to and including the expert
    expert = _code((WORKLOAD_DIR / "expert.cu").read_text())
    for i, mech in enumerate(mechs):
        for pat in ENTERS[mech]:
            for later_name, later in list(zip(NAMES[i + 1:], codes[i + 1:])) + [("expert.cu", expert)]:
                assert re.search(pat, later), f"{later_name} lost {mech} ({pat!r})"
    # the shared-memory tree of step 04 is replaced by shuffles in 05
    assert "__syncwarp" in codes[3] and "__shfl" not in codes[3]
    assert "__syncwarp" not in codes[4]
    # 07 coarsens without #pragma; 08 adds exactly the three pragmas
    assert codes[6].count("#pragma") == 0 and codes[7].count("#pragma unroll") == 3


def test_block_per_row_is_expert_without_clusters():
    v09 = _code(_source("09_block_per_row.cu"))
    expert = _code((WORKLOAD_DIR / "expert.cu").read_text())
    for pat in CLUSTER:
        assert re.search(pat, expert), f"expert.cu no longer has {pat!r}: update the ladder"
        assert not re.search(pat, v09), f"09 still uses the cluster mechanism ({pat!r})"
    # every tuning macro of the expert that is not about the cluster split is kept, same default
    defines = lambda c: dict(re.findall(r"#define (ROW_SUM_\w+) (\S+)", c))
    want = {k: v for k, v in defines(expert).items()
            if k not in ("ROW_SUM_MAX_SPLIT", "ROW_SUM_TARGET_CTAS", "ROW_SUM_MIN_VEC_PER_CTA")}
    assert {k: v for k, v in defines(v09).items() if k.startswith("ROW_SUM_")} == want


# ---------------------------------------------------------------- nvcc


@pytest.mark.nvcc
@pytest.mark.parametrize("name", NAMES)
def test_compiles(name):
    from klineage.gate.compile import compile_kernel

    res = compile_kernel(_source(name))
    assert res.ok, f"{name}: {res.error_message}\n{res.log}"
    assert res.resources, f"{name}: no ptxas resource report"


# ---------------------------------------------------------------- GPU: every rung against the oracle

EXTRA_SHAPES = [
    {"rows": 9, "cols": 2}, {"rows": 5, "cols": 3}, {"rows": 17, "cols": 5}, {"rows": 8, "cols": 32},
    {"rows": 33, "cols": 8191}, {"rows": 3, "cols": 8192}, {"rows": 3, "cols": 8193},
    {"rows": 2, "cols": 8195}, {"rows": 300, "cols": 65537},
]
RUNGS = ["naive.cu", *NAMES, "expert.cu"]
VARIANTS = [(n, ()) for n in RUNGS] + [
    ("04_warp_per_row.cu", ("-DROW_SUM_WARP_BLOCKS_PER_SM=1",)),
    ("09_block_per_row.cu", ("-DROW_SUM_WARP_BLOCKS_PER_SM=1",)),
    ("09_block_per_row.cu", ("-DROW_SUM_LOAD_MODE=1",)),
    ("09_block_per_row.cu", ("-DROW_SUM_LOAD_MODE=2",)),
]


def _rung_source(name: str) -> str:
    path = VERSIONS_DIR / name if name[0].isdigit() else WORKLOAD_DIR / name
    return path.read_text()


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
        x = workload.make_inputs(shape, seed=7, device="cuda")["x"]
        ref = workload.reference({"x": x}, shape)["out"]
        # offset 0: rows start where the allocation does; 1..3: the first row is not 16-byte aligned
        for offset in (0, 1, 2, 3) if rows * cols <= 1 << 22 else (0,):
            buf = torch.empty(rows * cols + offset, dtype=torch.float32, device="cuda")
            xs = buf[offset:].view(rows, cols)
            xs.copy_(x)
            out = torch.full((rows + 1,), float("nan"), dtype=torch.float32, device="cuda")
            rc = cand.call({"x": xs, "out": out}, {"rows": rows, "cols": cols}, stream)
            torch.cuda.synchronize()
            assert rc == 0, f"{name} {flags} {shape} offset {offset}: cudaError {rc}"
            cmp = compare(out[:rows], ref, workload.tolerance)
            assert cmp.ok, f"{name} {flags} {shape} offset {offset}: {cmp.reason}"
            assert torch.isnan(out[rows]), f"{name} {flags} {shape}: wrote past out[rows - 1]"
