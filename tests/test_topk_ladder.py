"""The hand-made version ladder of topk: naive.cu -> versions/01..08 -> expert.cu, one optimization
mechanism per step, and the workload's contract (sorted values through the oracle, indices through
its check() hook, because tied values make indices ambiguous).

Checked here without a GPU: the files, their `// klineage-step: mechanism=` headers, the ABI, the
static guard, that each step's signature text appears where its mechanism enters (and stays), that
consecutive rungs pass the versions audit (detected mechanisms differ only by the declared one),
that the scripted versions walk ends `complete`, that every rung compiles with nvcc without local
memory, and the workload's inputs, oracle and check on the CPU. With a GPU (`requires_cuda`), every
rung is run on the benchmark and probe shapes plus extra edge shapes and misaligned bases, and
checked against the oracle and check().
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.ladder_support import assert_versions_walk
from klineage.gate.correctness import compare, compare_outputs, negative_controls
from klineage.gate.guard import check_source, strip_comments
from klineage.mechanisms.audit import audit_version
from klineage.mechanisms import detect_all, registry
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD_DIR = ROOT / "expert_kernels" / "topk"
VERSIONS_DIR = WORKLOAD_DIR / "versions"

LADDER = [
    ("01_block_per_row.cu", "block_per_row"),
    ("02_smem_staging.cu", "smem_staging"),
    ("03_radix_select.cu", "radix_select"),
    ("04_bitonic_sort.cu", "bitonic_sort"),
    ("05_warp_bitonic.cu", "warp_bitonic"),
    ("06_vector_access.cu", "vector_access"),
    ("07_launch_bounds.cu", "launch_bounds"),
    ("08_restrict.cu", "restrict"),
]
EXPERT_ADDS = "coarsening"
NAMES = [name for name, _ in LADDER]
RUNGS = ["naive.cu", *NAMES, "expert.cu"]
HEADER_RE = re.compile(r"\A// klineage-step: mechanism=([a-z_]+)[ \t]*\n// \S.*\n")

# Live-code text each mechanism brings in, from its step on (up to and including the expert).
ENTERS = {
    "block_per_row": [r"<<<batch, TOPK_BLOCK, 0, stream>>>", r"topk_rank_global_kernel"],
    "smem_staging": [r"__shared__ float4? s_row4?\[TOPK_SMEM_ELEMS", r"length <= TOPK_SMEM_ELEMS"],
    "radix_select": [r"radix_pick_digit\(", r"atomicAdd\(&s_hist\[", r"shift -= 8"],
    "bitonic_sort": [r"q < \(P >> 1\)", r"const bool desc = \(i & size\) == 0;"],
    "warp_bitonic": [r"__shfl_xor_sync\(0xffffffffu, ", r"void warp_stage\(", r"int P = 32\b"],
    "vector_access": [r"const float4\* row4", r"s_row4\[i\] = row4\[i\]", r"col_of\(", r"x_mis"],
    "launch_bounds": [r"__launch_bounds__\(TOPK_BLOCK\)"],
    "restrict": [r"const float\* __restrict__ x, float\* __restrict__ values, int\* __restrict__ indices"],
    EXPERT_ADDS: [r"#define TOPK_SORT_PER_THREAD 4", r"void thread_stages\(", r"item_of\("],
}


def _path(name: str) -> Path:
    return VERSIONS_DIR / name if name[0].isdigit() else WORKLOAD_DIR / name


def _source(name: str) -> str:
    return _path(name).read_text()


def _code(source: str) -> str:
    return strip_comments(source)[0]


@pytest.fixture(scope="module")
def workload():
    return load_workload(WORKLOAD_DIR)


# ---------------------------------------------------------------- files and headers


def test_ladder_files_exist_in_order():
    present = sorted(p.name for p in VERSIONS_DIR.glob("*.cu"))
    assert present == NAMES
    assert (WORKLOAD_DIR / "naive.cu").is_file() and (WORKLOAD_DIR / "expert.cu").is_file()
    import tomllib
    meta = tomllib.loads((VERSIONS_DIR / "ladder.toml").read_text())
    assert meta["expert_adds"] == EXPERT_ADDS and meta["description"]


def test_headers_name_the_mechanisms_in_order():
    found = []
    for name in NAMES:
        m = HEADER_RE.match(_source(name))
        assert m, f"{name}: no '// klineage-step: mechanism=<name>' header followed by a description line"
        found.append(m.group(1))
    assert found == [mech for _, mech in LADDER]
    assert not HEADER_RE.match(_source("expert.cu")), "the expert declares its step in ladder.toml"


def test_declared_mechanisms_are_registered():
    reg = registry()
    for mech in [m for _, m in LADDER] + [EXPERT_ADDS]:
        assert mech in reg, f"{mech} is not a registered mechanism"
    for mech in ("block_per_row", "radix_select", "bitonic_sort", "warp_bitonic"):
        assert reg[mech].DETECTABLE is False and reg[mech].PRECONDITIONS
    assert reg[EXPERT_ADDS].DETECTABLE is not False  # the expert's step is audited by its detector


@pytest.mark.parametrize("name", RUNGS)
def test_abi_and_contract(name, workload):
    src = _source(name)
    code = _code(src)
    assert "#include <cuda_runtime.h>" in src
    assert src.count(workload.c_signature) == 1, f"{name}: must export {workload.c_signature}"
    launches = re.findall(r"<<<[^>]*>>>", code)
    assert launches and all(re.fullmatch(r"<<<[^>]*,\s*0,\s*stream>>>", l) for l in launches), \
        f"{name}: launches not on the stream argument"
    assert "return cudaGetLastError();" in code
    assert not re.search(r"\bstatic\b", code), f"{name}: keeps static state"
    # atomics only on shared memory (histogram bins and slot counters)
    for m in re.finditer(r"\batomic\w*\s*\(\s*&?\s*(\w+)", code):
        assert m.group(1).startswith("s_"), f"{name}: atomic on {m.group(1)}"


@pytest.mark.parametrize("name", RUNGS)
def test_static_guard(name, workload):
    res = check_source(_source(name), workload)
    assert res.ok, f"{name}: {res.summary}"


def test_each_mechanism_enters_at_its_step():
    mechs = [mech for _, mech in LADDER] + [EXPERT_ADDS]
    chain = ["naive.cu", *NAMES, "expert.cu"]
    codes = [_code(_source(n)) for n in chain]
    for step, mech in enumerate(mechs, start=1):
        for pat in ENTERS[mech]:
            assert not any(re.search(pat, c) for c in codes[:step]), f"{pat!r} appears before {chain[step]}"
            for later, code in zip(chain[step:], codes[step:]):
                assert re.search(pat, code), f"{later} lacks {mech} ({pat!r})"


def test_replaced_code_leaves_at_its_step():
    c = {n: _code(_source(n)) for n in RUNGS}
    # 03 replaces the staged rank counting with radix select (the global kernel stays as fallback)
    assert "topk_rank_staged_kernel" in c["02_smem_staging.cu"]
    assert all("topk_rank_staged_kernel" not in c[n] for n in RUNGS[3:])
    # 04 replaces the candidates' rank counting with the bitonic network
    assert "rank += s_cand[j] > mine" in c["03_radix_select.cu"]
    assert all("rank += s_cand[j]" not in c[n] for n in RUNGS[4:])
    # the expert's sorting threads hold several candidates: registers padded to 32 of them per warp
    assert "int P = 32;" in c["08_restrict.cu"] and "int P = 32 * TOPK_SORT_PER_THREAD;" in c["expert.cu"]
    # 06 on: the float4 body is the only staging copy of the radix kernel
    assert all("s_row[i] = row[i]" not in c[n] for n in RUNGS[6:])


def test_expert_keeps_the_tuning_macros_of_the_last_version():
    defines = lambda name: dict(re.findall(r"#define (TOPK_\w+) (\S+)", _code(_source(name))))
    assert defines("08_restrict.cu") == {"TOPK_BLOCK": "1024", "TOPK_SMEM_ELEMS": "8192", "TOPK_MAX_K": "1024"}
    assert defines("expert.cu") == {**defines("08_restrict.cu"), "TOPK_SORT_PER_THREAD": "4"}


def test_consecutive_rungs_pass_the_versions_audit():
    known = {m.NAME for m in registry().values() if m.DETECTABLE}
    feats = [detect_all(_source(n)) for n in RUNGS]
    mechs = [mech for _, mech in LADDER] + [EXPERT_ADDS]
    for i, mech in enumerate(mechs):
        audit = audit_version(feats[i + 1], feats[i], mech, known)
        assert audit["ok"], f"{RUNGS[i]} -> {RUNGS[i + 1]} ({mech}): {audit['reason']}"
    assert {f.mechanism for f in feats[-1]} == {"smem_staging", "vector_access", "launch_bounds", "restrict",
                                                 "coarsening"}
    assert [f.locus for f in feats[-1] if f.mechanism == "coarsening"] == ["TOPK_SORT_PER_THREAD"]


def test_versions_ladder_walks_to_the_naive_kernel(workload):
    assert_versions_walk(workload, WORKLOAD_DIR, LADDER, EXPERT_ADDS)


# ---------------------------------------------------------------- nvcc


@pytest.mark.nvcc
@pytest.mark.parametrize("name", RUNGS)
def test_compiles_without_local_memory(name):
    from klineage.gate.compile import compile_kernel

    res = compile_kernel(_source(name))
    assert res.ok, f"{name}: {res.error_message}\n{res.log}"
    assert res.resources, f"{name}: no ptxas resource report"
    assert not res.spills and all(r.stack_bytes == 0 for r in res.resources), f"{name}: local memory\n{res.log}"


@pytest.mark.nvcc
@pytest.mark.parametrize("flags", [("-DTOPK_BLOCK=512",), ("-DTOPK_BLOCK=64",), ("-DTOPK_SORT_PER_THREAD=1",),
                                   ("-DTOPK_SORT_PER_THREAD=8",), ("-DTOPK_SMEM_ELEMS=4096", "-DTOPK_MAX_K=2048")])
def test_expert_compiles_with_other_tuning(flags):
    from klineage.gate.compile import compile_kernel

    res = compile_kernel(_source("expert.cu"), extra_flags=flags)
    assert res.ok, f"{flags}: {res.error_message}\n{res.log}"
    assert not res.spills and all(r.stack_bytes == 0 for r in res.resources), f"{flags}: local memory"


# ---------------------------------------------------------------- the workload on the CPU


def test_workload_contract(workload):
    assert workload.name == "topk" and workload.entry == "topk"
    assert workload.output_names == ("values", "indices")
    assert workload.c_signature == ('extern "C" cudaError_t topk(const float* x, float* values, int* indices, '
                                    'int batch, int length, int k, cudaStream_t stream)')
    assert workload.benchmark_cases == ({"batch": 64, "length": 4096, "k": 512},)
    assert workload.bytes_moved(workload.benchmark_cases[0]) == 64 * 4096 * 4 + 64 * 512 * 8
    for _, shape in workload.all_shapes():
        assert 1 <= shape["k"] <= shape["length"], shape
        assert set(workload.scalars(shape)) == {"batch", "length", "k"}
    probes = workload.probe_shapes
    assert any(s["k"] == s["length"] for s in probes) and any(s["k"] == 1 for s in probes)
    assert any(s["length"] % 4 for s in probes) and any(s["batch"] == 1 for s in probes)
    assert {s.get("offset") for s in probes} >= {1, 3}
    assert any(s["length"] > 8192 for s in probes) and any(s["k"] > 1024 for s in probes)  # fallback kernel
    assert any(s.get("levels") == 1 for s in probes) and any(s.get("special") for s in probes)


def test_make_inputs_deterministic_seed_dependent_and_as_described(workload):
    shape = {"batch": 3, "length": 257, "k": 9}
    a, b, c = (workload.make_inputs(shape, s)["x"] for s in (1, 1, 2))
    assert a.dtype == torch.float32 and a.shape == (3, 257) and a.is_contiguous()
    assert torch.equal(a, b) and not torch.equal(a, c)
    tied = workload.make_inputs({**shape, "levels": 3}, 1)["x"]
    assert set(tied.unique().tolist()) <= {1.5, 1.75, 2.0}
    assert torch.equal(workload.make_inputs({**shape, "levels": 1}, 4)["x"], torch.full((3, 257), 1.5))
    sp = workload.make_inputs({"batch": 4, "length": 2000, "k": 9, "special": 1}, 1)["x"]
    for v in (float("-inf"), float("inf"), 3.4028234663852886e38, -3.4028234663852886e38):
        assert (sp == v).any(), v
    zeros = sp[sp == 0]
    assert (torch.signbit(zeros)).any() and (~torch.signbit(zeros)).any()
    assert not torch.isnan(sp).any()


def _valid_outputs(x: torch.Tensor, k: int, highest_ties: bool = False) -> dict:
    """A correct answer built on the CPU: sorted descending, ties by the lowest column (or highest)."""
    cols = torch.arange(x.shape[1], dtype=torch.float64)
    tie = cols if highest_ties else -cols
    order = torch.stack([torch.tensor(sorted(range(x.shape[1]), key=lambda j: (float(r[j]), float(tie[j])),
                                             reverse=True)[:k]) for r in x])
    return {"values": x.gather(1, order), "indices": order.to(torch.int32)}


@pytest.mark.parametrize("shape", [
    {"batch": 3, "length": 50, "k": 7}, {"batch": 2, "length": 40, "k": 40, "levels": 3},
    {"batch": 2, "length": 60, "k": 45, "special": 1}, {"batch": 1, "length": 1, "k": 1},
])
def test_reference_and_check_accept_every_valid_answer(shape, workload):
    x = workload.make_inputs(shape, 3)["x"]
    ref = workload.reference({"x": x}, shape)
    assert set(ref) == {"values"} and ref["values"].dtype == torch.float64
    want = torch.sort(x.double(), dim=1, descending=True).values[:, :shape["k"]]
    assert torch.equal(ref["values"], want)
    for highest in (False, True):  # either choice among tied columns is valid
        outs = _valid_outputs(x, shape["k"], highest)
        assert workload.check({"x": x}, outs, shape) == []
        assert all(c.ok for c in compare_outputs(outs, ref, workload.tolerance).values())
    vend = workload.vendor({"x": x}, shape)
    assert workload.check({"x": x}, vend, shape) == []
    assert compare(vend["values"], ref["values"], workload.tolerance).ok


def test_check_names_each_kind_of_wrong_output(workload):
    shape = {"batch": 2, "length": 64, "k": 10, "levels": 4}
    x = workload.make_inputs(shape, 5)["x"]
    good = _valid_outputs(x, 10)

    def broken(edit):
        outs = {k: v.clone() for k, v in good.items()}
        edit(outs)
        return workload.check({"x": x}, outs, shape)

    def dup(o):
        o["indices"][1, 3] = o["indices"][1, 2]
        o["values"][1, 3] = o["values"][1, 2]

    assert any("repeated" in p for p in broken(dup))
    assert any("outside" in p for p in broken(lambda o: o["indices"].__setitem__((0, 0), 64)))
    assert any("outside" in p for p in broken(lambda o: o["indices"].fill_(-2**31)))  # the gate's poison
    assert any("not x at their index" in p for p in broken(lambda o: o["values"].__setitem__((0, 5), 9.0)))
    assert any("not x at their index" in p for p in broken(lambda o: o["values"].fill_(float("nan"))))

    def swap(o):  # a valid set in the wrong order
        for t in o.values():
            t[0, [0, 9]] = t[0, [9, 0]]

    if good["values"][0, 0] != good["values"][0, 9]:
        assert any("descending" in p for p in broken(swap))

    def not_top(o):  # a real element of the row, but not among the k largest
        smallest = int(torch.argmin(x[0]))
        o["indices"][0, 9], o["values"][0, 9] = smallest, x[0, smallest]

    if x[0, int(torch.argmin(x[0]))] < good["values"][0, 9]:
        assert any("k largest" in p for p in broken(not_top))


def test_negative_controls_are_rejected(workload):
    for shape in (workload.benchmark_cases[0], workload.probe_shapes[7], workload.probe_shapes[10]):
        inputs = workload.make_inputs(shape, 1)
        refs = workload.reference(inputs, shape)
        controls = negative_controls(workload, inputs, refs, shape)
        assert controls["zeros"]["rejected"], (shape, controls)
        assert controls["copy_of_input"]["rejected"], (shape, controls)


# ---------------------------------------------------------------- GPU: every rung against the oracle

EXTRA_SHAPES = [
    {"batch": 2, "length": 31, "k": 31}, {"batch": 2, "length": 32, "k": 32}, {"batch": 2, "length": 33, "k": 1},
    {"batch": 2, "length": 64, "k": 33}, {"batch": 3, "length": 5, "k": 2, "levels": 1},
    {"batch": 1, "length": 8192, "k": 1024}, {"batch": 1, "length": 8193, "k": 1024},
    {"batch": 1, "length": 2000, "k": 1025}, {"batch": 130, "length": 300, "k": 50},
    {"batch": 2, "length": 4096, "k": 4096 // 5, "levels": 2},
]
VARIANTS = [(n, ()) for n in RUNGS] + [
    ("expert.cu", ("-DTOPK_BLOCK=512",)),
    ("expert.cu", ("-DTOPK_BLOCK=64",)),
    ("expert.cu", ("-DTOPK_SORT_PER_THREAD=1",)),
    ("expert.cu", ("-DTOPK_SORT_PER_THREAD=8",)),
    ("expert.cu", ("-DTOPK_SMEM_ELEMS=4096", "-DTOPK_MAX_K=2048")),
    ("05_warp_bitonic.cu", ("-DTOPK_BLOCK=256",)),
]


@pytest.mark.requires_cuda
@pytest.mark.nvcc
@pytest.mark.parametrize("name,flags", VARIANTS, ids=[f"{n}{''.join(f)}" for n, f in VARIANTS])
def test_rung_matches_oracle_on_gpu(name, flags, workload):
    from klineage.gate.compile import compile_kernel
    from klineage.gate.worker import Candidate

    res = compile_kernel(_source(name), extra_flags=flags)
    assert res.ok, res.log
    cand = Candidate(res.so_path, workload)
    stream = torch.cuda.current_stream()
    for shape in [s for _, s in workload.all_shapes()] + EXTRA_SHAPES:
        b, n, k = shape["batch"], shape["length"], shape["k"]
        x = workload.make_inputs(shape, 7, device="cuda")["x"]
        ref = workload.reference({"x": x}, shape)
        # 0: rows start where the allocation does; 1..3: the base is not 16-byte aligned
        offsets = (shape["offset"],) if "offset" in shape else (0, 1, 2, 3) if b * n <= 1 << 20 else (0,)
        for off in offsets:
            xs = torch.empty(b * n + off, dtype=torch.float32, device="cuda")[off:].view(b, n)
            xs.copy_(x)
            vals = torch.full((b * k + 1 + off,), float("nan"), device="cuda")[off:]
            idx = torch.full((b * k + 1 + off,), -2**31, dtype=torch.int32, device="cuda")[off:]
            rc = cand.call({"x": xs, "values": vals, "indices": idx}, workload.scalars(shape), stream)
            torch.cuda.synchronize()
            where = f"{name} {flags} {shape} offset {off}"
            assert rc == 0, f"{where}: cudaError {rc}"
            outs = {"values": vals[:b * k].view(b, k), "indices": idx[:b * k].view(b, k)}
            problems = workload.check({"x": x}, outs, shape)
            assert not problems, f"{where}: {problems}"
            cmp = compare_outputs(outs, ref, workload.tolerance)
            assert all(c.ok for c in cmp.values()), f"{where}: {[c.reason for c in cmp.values()]}"
            assert torch.isnan(vals[b * k]) and int(idx[b * k]) == -2**31, f"{where}: wrote past the end"
            assert torch.equal(xs, x), f"{where}: modified x"


class _Quiet:
    def progress(self, *a, **kw):
        pass


@pytest.mark.requires_cuda
@pytest.mark.nvcc
def test_gate_worker_judges_indices_through_check(workload):
    """The worker's correctness pass calls the workload's check(): right values with wrong indices
    fail, with check's problem as the reason."""
    from klineage.gate.compile import compile_kernel
    from klineage.gate.worker import Candidate, Evaluator

    ev = Evaluator(_Quiet())
    shapes = [("probe", s) for s in workload.probe_shapes[5:9]]
    good = compile_kernel(_source("expert.cu"))
    report = ev.correctness(Candidate(good.so_path, workload), workload, shapes, (1, 2))
    assert all(r["ok"] for r in report), report
    assert all(s["check"] == [] for r in report for s in r["seeds"])
    bad_src = _source("expert.cu").replace("indices[at] = (int)(0xffffffffu - (unsigned int)c);", "indices[at] = 0;")
    assert bad_src != _source("expert.cu")
    bad = compile_kernel(bad_src)
    report = ev.correctness(Candidate(bad.so_path, workload), workload, shapes, (1,))
    for r in report:
        seed = r["seeds"][0]
        assert not r["ok"] and all(o["ok"] for o in seed["outputs"].values())  # the values are right
        assert any("repeated indices" in p or "not x at their index" in p for p in seed["check"])
