"""The GPU record of `klineage apply` (budget 12) on the naive kernels of apply_workloads/
(benchmarks/results/apply_naive/, written by `OUT=... bash benchmarks/apply_naive_gpu.sh --per-gpu 8`
in one device call): it covers every kernel of the matrix-product, reduction, softmax and
normalisation classes, at least 80% of them run, it is named by the card its environment shows, runs
that shared the card timed under its lock, and its figures are those of its evaluations; runs are
replayed on the CPU from the exported evaluations and must give the recorded trajectory, and
`apply --dry-run` names the candidate each live run gated first. It measures nothing.
"""
from __future__ import annotations

import json
import math
import shutil

import pytest
from click.testing import CliRunner

from tests.test_apply_naive_record import DIR, ROOT, bench
from record_names import card, card_of, the_record  # noqa: E402 (benchmarks/ on the path: the line above)


@pytest.fixture(scope="module")
def record() -> dict:
    path = the_record(DIR, bench.RECORD, "run `OUT=... bash benchmarks/apply_naive_gpu.sh` in one device call "
                                         "(carry .whlh) and copy $OUT/apply_naive into benchmarks/results/apply_naive/")
    rec = json.loads(path.read_text())
    assert rec["kernels"], f"{path} holds no kernel"
    rec["_path"] = path
    return rec


def test_the_record_is_named_by_its_card_and_covers_every_kernel(record):
    env = record["env"]
    assert env and env.get("gpu") and env.get("driver") and env.get("nvcc") and env.get("torch")
    assert card_of(record["_path"], bench.RECORD) == card(env["gpu"])
    assert list(record["kernels"]) == bench.kernels()
    assert record["config"]["budget_steps"] == 12
    assert "calls" not in record["config"], "the record joins several device calls: record it in one"


def test_runs_that_shared_the_card_timed_under_its_lock(record):
    """With several runs a GPU, every evaluation waited for the card's lock (phases.gpu_wait_s) and
    was measured on the record's card."""
    import gzip
    if record["config"].get("per_gpu", 1) <= 1:
        pytest.skip("one run at a time on each GPU: no lock")
    for name, r in record["kernels"].items():
        if r["status"] != "done":
            continue
        rows = [json.loads(l) for l in gzip.decompress((DIR / "evals" / f"{name}.jsonl.gz").read_bytes()).splitlines()]
        measured = [e for e in rows if e["status"] == "PASSED"]
        assert measured, name
        for e in measured:
            assert "gpu_wait_s" in (e["result"].get("phases") or {}), (name, e["eval_key"])
            assert e["gpu"] == record["env"]["gpu"], (name, e["eval_key"])
        assert r["gpu_wait_s"] == pytest.approx(sum((e["result"].get("phases") or {}).get("gpu_wait_s", 0.0)
                                                           for e in rows), abs=0.1)
    done = [n for n, r in record["kernels"].items() if r["status"] == "done"]
    assert len(done) >= 0.8 * len(record["kernels"]), {n: r["status"] for n, r in record["kernels"].items()}


def test_each_figure_is_its_evaluations(record):
    for name, r in record["kernels"].items():
        if r["status"] != "done":
            assert r.get("why") or r.get("log") or r["status"] in ("timeout", "start_failed"), name
            continue
        assert r["shapes"], name
        assert (DIR / "evals" / f"{name}.jsonl.gz").is_file() and (DIR / "runs" / name / "trajectory.json").is_file()
        for s in r["shapes"]:
            assert math.isclose(s["speedup_vs_torch"], s["torch_us"] / s["best_us"], rel_tol=1e-9), name
            assert s["speedup_vs_naive"] > 0 and s["naive_us"] > 0
        assert r["stop_reason"] in ("budget_steps", "no_candidates", "budget_time")
    assert record["summary"] == bench.summary(record["kernels"])


REPLAYED = ("sum_dim1_strided", "softmax_wrapped", "rmsnorm_channels")


@pytest.mark.parametrize("name", REPLAYED)
def test_a_run_replays_from_its_evaluations(record, name, tmp_path):
    """The run, replayed on the CPU with the recorded evaluations (`klineage apply --replay`), keeps the
    same skills for the same reason and reaches the same speedup."""
    from klineage.cli import main
    from klineage.store import open_store
    r = record["kernels"][name]
    if r["status"] != "done":
        pytest.skip(f"{name} did not run on the GPU ({r['status']})")
    db = tmp_path / "lib.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    store = open_store(db)
    store.import_evaluations(DIR / "evals" / f"{name}.jsonl.gz")
    store.close()
    d = ROOT / "apply_workloads" / name
    res = CliRunner().invoke(main, ["apply", "--workload", str(d), "--start", str(d / "naive.cu"), "--db", str(db),
                                    "--budget-steps", str(record["config"]["budget_steps"]), "--replay", "--json",
                                    "--quiet"])
    assert res.exit_code == 0, res.output[-2000:]
    run = json.loads(res.output)
    assert run["run_id"] == r["run_id"] and run["stop_reason"] == r["stop_reason"]
    assert run["summary"]["kept"] == r["kept"]
    got = {json.dumps(c["shape"], sort_keys=True): c["speedup"] for c in run["summary"].get("speedup_vs_start") or []}
    for s in r["shapes"]:
        assert math.isclose(got.get(json.dumps(s["shape"], sort_keys=True), 1.0), s["speedup_vs_naive"], rel_tol=1e-9)


def test_the_dry_runs_first_candidate_is_the_live_runs(record, tmp_path):
    """On every kernel the record ran, `apply --dry-run` names the candidate the live run gated first."""
    from klineage.cli import main
    from klineage.store import open_store
    db = tmp_path / "lib.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    store = open_store(db, read_only=True)
    try:  # retrieval ranks by the library: the record's runs copied the shipped one of their day
        assert store.library_hash() == record["config"].get("library"), \
            "the shipped library is not the one the record's runs copied: record the runs again"
    finally:
        store.close()
    for name, r in record["kernels"].items():
        if r["status"] != "done":
            continue
        d = ROOT / "apply_workloads" / name
        res = CliRunner().invoke(main, ["apply", "--workload", str(d), "--start", str(d / "naive.cu"), "--db", str(db),
                                        "--budget-steps", str(record["config"]["budget_steps"]), "--dry-run", "--json"])
        assert res.exit_code == 0, res.output[-2000:]
        plan = json.loads(res.output)
        cls = _start_bottleneck(name, (d / "naive.cu").read_text())  # what the live run knew once it gated the start
        first = plan["first_candidate_by_bottleneck"][cls] if cls in plan["first_candidate_by_bottleneck"] else \
            plan["first_candidate"]
        live = next(s for s in r["steps"] if s["kind"] == "candidate")
        assert (first["backend"], first["skill"], first["flags"] or []) == \
            (live["backend"], live["skill"], live["flags"] or []), (name, cls)


def _start_bottleneck(name: str, naive: str) -> str:
    """The bottleneck class of the start kernel's recorded evaluation (klineage.apply.retrieve)."""
    import gzip
    from types import SimpleNamespace
    from klineage.apply.retrieve import bottleneck_of
    from klineage.gate.gate import kernel_hash
    path = DIR / "evals" / f"{name}.jsonl.gz"
    assert path.is_file(), f"{name}: no recorded evaluations"
    rows = [json.loads(l) for l in gzip.decompress(path.read_bytes()).splitlines()]
    start = [e for e in rows if e["kernel_hash"] == kernel_hash(naive) and e["status"] == "PASSED"]
    assert start, f"{name}: no recorded evaluation of the start kernel"
    e = start[0]
    return bottleneck_of(SimpleNamespace(timing=e["result"].get("timing"), eval_key=e["eval_key"]))["class"]


def test_docs_show_the_records_table(record):
    table = bench.markdown({k: v for k, v in record.items() if k != "_path"})
    assert table in (ROOT / "docs" / "apply.md").read_text(), \
        "docs/apply.md's table is not the record's: python benchmarks/apply_naive_gpu.py --out /tmp/x --table RECORD"
