"""The forward re-derivation check measured, not 1 by identity (benchmarks/rederive_h200.py).

- Without a GPU: the re-typed re-derivations the scripted server answers are the rungs' programs
  (the same detector features, other bytes), and a walk over them (a scripted gate: no figure here is
  a measurement) evaluates every re-derived kernel on its own instead of reusing the richer record.
- The H200 record (benchmarks/results/rederive_h200.json and its evaluations): every step re-derived
  non-identically, each per-trial ratio recomputed from the two recorded evaluations it compares,
  the accept / reject decision the 0.99 threshold gives, and with nvcc the walks replayed from those
  evaluations reach the same steps, ratios and rejections.
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from klineage.apply.llm import LLMMaterializer
from klineage.llm import DEFAULT_MODEL, OpenAICompatBackend
from tests.support.scripted_server import ScriptedServer, mine_script
from klineage.lineage.proposers import ladder_from_folder, make_proposer
from klineage.lineage.walk import Limits, Walker
from klineage.mechanisms import detect_all
from klineage.workload import load_workload
from tests.lineage.test_walk import ScriptedGate

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
RECORD = RESULTS / "rederive_h200.json"
RECORD_EVALS = RESULTS / "rederive_h200.jsonl.gz"
sys.path.insert(0, str(ROOT / "benchmarks"))
import rederive_h200  # noqa: E402

RECORD_IT = ("record it on an H200 (one device call, carry .whlx): python3 benchmarks/rederive_h200.py --out $OUT, "
             "then copy $OUT/rederive_h200.{json,log,jsonl.gz} into benchmarks/results/ (see the script's docstring)")


@pytest.mark.parametrize("name", rederive_h200.WORKLOADS)
def test_retyped_rungs_are_the_same_program_in_other_bytes(name):
    for v in ladder_from_folder(ROOT / "expert_kernels" / name):
        again = rederive_h200.retyped(v.source)
        assert again != v.source and again.startswith(rederive_h200.NOTE)
        assert {f.key for f in detect_all(again)} == {f.key for f in detect_all(v.source)}, v.label


def test_a_walk_measures_each_non_identical_rederivation_on_its_own():
    wl_dir = ROOT / "expert_kernels" / "swiglu"
    script = mine_script(wl_dir, rederived=rederive_h200.retyped)
    gate = ScriptedGate(latency=lambda src: 50.0 if src.startswith(rederive_h200.NOTE) else 100.0)
    seen: list[str] = []
    evaluate = gate.evaluate
    gate.evaluate = lambda src, wl, origin=None, replay=False: seen.append(src) or evaluate(src, wl, origin, replay)
    with ScriptedServer(script["replies"], script["default"]) as server:
        llm = LLMMaterializer(OpenAICompatBackend(server.url + "/v1", DEFAULT_MODEL, env={}), budget_usd=2.0)
        lin = Walker(gate, load_workload(wl_dir), [make_proposer("llm", wl_dir, llm=llm)],
                     Limits(**rederive_h200.LIMITS)).run((wl_dir / "expert.cu").read_text())
    steps = lin["transitions"]
    assert [t["mechanism"] for t in steps] == script["expect"]["mechanisms"]
    assert steps and not any(t["rederived_identical"] for t in steps)
    assert sum(s.startswith(rederive_h200.NOTE) for s in seen) == len(steps)  # one evaluation per re-derivation
    # the ratio compares the two evaluations (here a scripted 100 us against 50 us), not a record with itself
    assert all(r == 2.0 for t in steps for tr in t["rederive_trials"] for r in tr["speed_ratios"])


# ---------------------------------------------------------------- the H200 record

# Until the record exists, every test of it must fail (strict): the check has not been measured yet.
unrecorded = pytest.mark.xfail(not (RECORD.is_file() and RECORD_EVALS.is_file()), strict=True,
                               reason=f"not measured yet: {RECORD_IT}")


@pytest.fixture(scope="module")
def record() -> dict | None:
    return json.loads(RECORD.read_text()) if RECORD.is_file() else None


@pytest.fixture(scope="module")
def evaluations() -> dict:
    if not RECORD_EVALS.is_file():
        return {}
    return {r["eval_key"]: r for r in map(json.loads, gzip.decompress(RECORD_EVALS.read_bytes()).splitlines())}


def _medians(rec: dict) -> list[list[float]]:
    return [t["trial_medians_us"] for t in rec["result"]["timing"]]


@unrecorded
def test_recorded_live_on_the_h200(record):
    assert record["mode"] == "live" and record["env"]["gpu"].startswith(("NVIDIA H200", "NVIDIA H100"))
    assert set(record["walks"]) == set(rederive_h200.WORKLOADS)
    for w in record["walks"].values():  # measured there, nothing read from earlier records
        assert "steps" in w and w["missing"] == 0 and "live" in w["sources"] and "replayed" not in w["sources"]


@unrecorded
def test_every_step_was_rederived_non_identically_and_measured(record, evaluations):
    steps = [s for w in record["walks"].values() for s in w["steps"]]
    assert steps and record["summary"]["non_identical"] == len(steps)
    for s in steps:
        assert not s["rederived_identical"] and s["rederived_hash"] != s["richer_hash"]
        assert s["eval_rederived"] != s["eval_richer"]  # two measurements, not a record with itself
        rich, red = evaluations[s["eval_richer"]], evaluations[s["eval_rederived"]]
        assert rich["status"] == red["status"] == "PASSED" and red["kernel_hash"] == s["rederived_hash"]
        want = [[o / r for o, r in zip(a, b)] for a, b in zip(_medians(rich), _medians(red))]
        got = [t["speed_ratios"] for t in s["trials"]]
        assert len(got) == len(want) and all(g == pytest.approx(w, rel=1e-12) for g, w in zip(got, want))
        assert min(min(x) for x in want) >= rederive_h200.LIMITS["min_rederive_ratio"]  # accepted: every trial passed
    ratios = [r for s in steps for t in s["trials"] for r in t["speed_ratios"]]
    assert any(r != 1.0 for r in ratios)  # measured: not the identity


@unrecorded
def test_rejected_rederivations_failed_the_threshold(record):
    for w in record["walks"].values():
        for r in w["rejections"]:
            if r["kind"] == "rederive_slow":
                assert min(x for t in r["trials"] for x in t["speed_ratios"]) < rederive_h200.LIMITS["min_rederive_ratio"]
    s = record["summary"]
    assert s["below_threshold"] == sum(
        x < rederive_h200.LIMITS["min_rederive_ratio"] for w in record["walks"].values() for r in w["rejections"]
        if r["kind"] == "rederive_slow" for t in r["trials"] for x in t["speed_ratios"])


@pytest.mark.nvcc
@unrecorded
def test_the_walks_replayed_from_the_record_reach_the_same_decisions(record, tmp_path):
    assert rederive_h200.main(["--out", str(tmp_path), "--replay", "--import", str(RECORD_EVALS)]) == 0
    again = json.loads((tmp_path / "rederive_h200.json").read_text())
    for name, w in record["walks"].items():
        got = again["walks"][name]
        assert "live" not in got["sources"] and got["missing"] == 0  # nothing measured here
        assert got["steps"] == w["steps"] and got["termination"] == w["termination"]
        assert [(r["kind"], r["mechanism"], r.get("trials")) for r in got["rejections"]] == \
            [(r["kind"], r["mechanism"], r.get("trials")) for r in w["rejections"]]
