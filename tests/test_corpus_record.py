"""The expert corpus on the H200 (benchmarks/results/corpus_h200.json), checked against the shipped
records it is computed from: every workload's expert PASSED on every benchmark and probe shape, and
its speed against the vendor reference and the copy bandwidth is what the README table says."""
import json
from pathlib import Path

import pytest

from tests.shipped import shipped_workload_dirs

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "results" / "corpus_h200.json"
# cases where the expert is below 85% of copy bandwidth or below its vendor reference (README explains)
SHORTFALLS = {("cumsum", "cols=1048576,rows=1"), ("swiglu", "cols=8192,rows=16384")}
# part 2 of the corpus (the tensor-core experts) has its own record and targets: corpus_all_h200.json
PART2_TARGETS = {"gemm": 0.75, "conv2d": 0.8, "fmha": 0.75, "gdn": 0.5}


def part1_dirs() -> list[Path]:
    """The shipped run's memory- and latency-bound workloads, which corpus_h200.json records."""
    return [d for d in shipped_workload_dirs() if d.name not in PART2_TARGETS]


@pytest.fixture(scope="module")
def rows():
    return json.loads(RECORD.read_text())


def _case(r):
    return ",".join(f"{k}={v}" for k, v in r["case"].items())


def test_every_corpus_workload_passed_everywhere(rows):
    names = {d.name for d in part1_dirs()}
    assert {r["workload"] for r in rows} == names
    for r in rows:
        assert r["status"] == "PASSED" and r["gpu"] == "NVIDIA H200"
        assert r["shapes_passed"] == r["shapes_checked"] >= 6


def test_speed_against_vendor_and_bandwidth(rows):
    for r in rows:
        key = (r["workload"], _case(r))
        if r["workload"] == "topk":  # latency-bound: the target is torch.topk
            assert r["speedup_vs_vendor"] >= 1.0
            continue
        if key in SHORTFALLS:
            continue
        assert r["fraction_of_copy"] >= 0.85, key
        assert r["speedup_vs_vendor"] >= 1.0, key


def test_record_matches_the_shipped_evaluations(rows, tmp_path):
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from corpus_table import table

    from klineage.store import open_store
    from klineage.store.recorded import import_recorded
    store = open_store(tmp_path / "r.duckdb")
    import_recorded(store)
    again = json.loads(json.dumps(table(store, part1_dirs()), default=str))
    store.close()
    assert again == rows


PROFILE = ROOT / "benchmarks" / "results" / "profile_shortfalls_h200.json"


def _ncu(kernels: dict, part: str, metric: str = "gpu__time_duration.sum") -> float:
    hits = [k for k in kernels if part in k]
    assert len(hits) == 1, (part, list(kernels))
    return kernels[hits[0]][metric]["median"]


def test_each_shortfall_has_its_profile_evidence():
    """The two shortfalls are explained by recorded H200 profiles (benchmarks/profile_shortfalls.py,
    CUPTI through torch.profiler and ncu): the GPU work of the expert is not the gap."""
    rec = json.loads(PROFILE.read_text())
    assert rec["env"]["gpu"] == "NVIDIA H200" and rec["env"]["torch"] and rec["env"]["driver"]
    k = rec["ncu"]["kernels"]
    # cumsum 1 x 1M: our two kernels take no more GPU time than torch's two (cub's init + scan); both
    # stream at a small fraction of DRAM peak, as an 8 MB problem must; a same-size 4 MB copy in the
    # gate's window takes half of either call, so no one-read-one-write kernel reaches 85% there.
    ours = _ncu(k, "cumsum_tile_sum_kernel") + _ncu(k, "cumsum_block_kernel")
    torch_ = _ncu(k, "DeviceScanInitKernel") + _ncu(k, "DeviceScanKernel")
    assert ours <= torch_
    for part in ("cumsum_tile_sum_kernel", "cumsum_block_kernel", "DeviceScanKernel"):
        assert _ncu(k, part, "dram__throughput.avg.pct_of_peak_sustained_elapsed") < 25
    v = rec["cumsum"]["variants"]
    two = v["two_pass (versions/09_reduce_then_scan)"]
    assert two["cupti"]["kernels_per_call"] == 2 and v["torch.cumsum (vendor)"]["cupti"]["kernels_per_call"] == 2
    copy_us = v["copy of the same 4 MB (out.copy_(x))"]["window"]["median_us"]
    assert copy_us > 0.4 * two["window"]["median_us"]
    assert rec["cumsum"]["bytes_moved"] / (copy_us * 1e-6) < 0.85 * rec["copy_bandwidth_bytes_per_s"]
    # the one-launch cluster experiment was slower at every configuration (so it is not the expert)
    assert all(c["window"]["median_us"] > two["window"]["median_us"] for n, c in v.items() if n.startswith("cluster"))
    # swiglu: both kernels move the same DRAM bytes at >= 85% of DRAM peak; Triton's is < 3% faster
    e, t = "swiglu_vec_kernel", "triton_poi_fused_mul_silu"
    for part in (e, t):
        assert _ncu(k, part, "dram__throughput.avg.pct_of_peak_sustained_elapsed") >= 85
    rd = _ncu(k, e, "dram__bytes_read.sum") / _ncu(k, t, "dram__bytes_read.sum")
    assert 0.99 < rd < 1.01
    assert 1.0 <= _ncu(k, e) / _ncu(k, t) < 1.03


# The whole corpus, tensor-core part included (benchmarks/results/corpus_all_h200.json, from the
# gate's H200 records of pipelines/mine.toml's workloads): issue 7's targets against the vendor
# measured in the same worker.
ALL = ROOT / "benchmarks" / "results" / "corpus_all_h200.json"


def test_tensor_core_experts_meet_their_targets():
    rows = json.loads(ALL.read_text())
    seen = set()
    for r in rows:
        if r["workload"] not in PART2_TARGETS:
            continue
        seen.add(r["workload"])
        assert r["status"] == "PASSED" and r["gpu"] == "NVIDIA H200"
        assert r["shapes_passed"] == r["shapes_checked"] >= 11
        assert r["speedup_vs_vendor"] >= PART2_TARGETS[r["workload"]], r["workload"]
        # compute-bound: the worker's own bf16 peak measurement and the fraction reached
        assert r["peak_TFLOPs"] > 600 and 0 < r["fraction_of_peak"] < 1
    assert seen == set(PART2_TARGETS)


def test_whole_corpus_record_matches_the_shipped_evaluations(tmp_path):
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from corpus_table import table

    from klineage.store import open_store
    from klineage.store.recorded import import_recorded
    store = open_store(tmp_path / "r.duckdb")
    import_recorded(store)
    again = json.loads(json.dumps(table(store, shipped_workload_dirs()), default=str))
    store.close()
    assert again == json.loads(ALL.read_text())
