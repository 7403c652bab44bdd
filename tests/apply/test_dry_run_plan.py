"""`apply --dry-run` plans what a live run gates first (klineage.apply.loop.plan_first: the search engine's
own rounds on the start kernel, structural rewrites included): on every naive kernel of apply_workloads/,
the candidate a live run on the CPU gates first, driven by a scripted gate (a test double: the start
passes with the timing of a chosen bottleneck class, every candidate fails, so the budget of one step
ends the run after it; no figure here is a measurement), is the plan's for that bottleneck class."""
from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from klineage.apply.loop import ApplyConfig, apply, plan_first
from klineage.cli import main
from klineage.gate.gate import GateConfig, GateResult, Status, kernel_hash
from klineage.store import open_store
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
NAIVE = sorted(p.parent for p in (ROOT / "apply_workloads").glob("*/naive.cu") if (p.parent / "workload.py").is_file())
CLASSES = ("memory", "compute", "latency")
# the start's timing for each class (klineage.apply.retrieve.bottleneck_of reads these fractions)
FRACTIONS = {"memory": (0.8, 0.1), "compute": (0.1, 0.7), "latency": (0.05, 0.05)}


class FirstGate:
    """The start passes with timing of bottleneck class `cls`; every candidate is recorded and fails."""

    def __init__(self, cls: str):
        self.config = GateConfig(arch="sm_90a")
        self.cls, self.seen = cls, []

    def with_config(self, config, share_worker=True):
        g = copy.copy(self)
        g.config = config
        return g

    def repeat(self, round_):
        return self.with_config(dataclasses.replace(self.config), share_worker=False)

    def close(self):
        pass

    def evaluate(self, source, workload, origin=None, replay=False):
        h = kernel_hash(source)
        if origin and origin.startswith("apply "):
            self.seen.append((h, tuple(self.config.extra_flags)))
            return GateResult(Status.INCORRECT, h, workload.name, "key-" + h[:16], "scripted", {},
                              error_kind="wrong_values", error_message="scripted failure")
        mem, comp = FRACTIONS[self.cls]
        timing = [{"shape": s, "latency_us": 100.0, "trial_medians_us": [100.0] * 3, "bandwidth_fraction": mem,
                   "compute_fraction": comp} for s in workload.benchmark_cases]
        return GateResult(Status.PASSED, h, workload.name, "key-" + h[:16], "scripted", {}, timing=timing,
                          env={"gpu": "scripted", "capability": "9.0"})


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    db = tmp_path_factory.mktemp("lib") / "skills.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    return db


@pytest.mark.parametrize("admission", [False, True], ids=["admission-off", "admission-on"])
@pytest.mark.parametrize("folder", NAIVE, ids=lambda p: p.name)
def test_the_plan_is_what_the_live_run_gates_first(folder, admission, library, tmp_path):
    wl = load_workload(folder)
    start = (folder / "naive.cu").read_text()
    cls = CLASSES[NAIVE.index(folder) % 3]  # each class on a third of the kernels
    cfg = ApplyConfig(budget_steps=1, admission=admission, structural={"mode": "library"})
    db = tmp_path / "run.duckdb"
    shutil.copy(library, db)
    store = open_store(db)
    try:
        skills = store.skills()
        plan = plan_first(skills, wl, start, cfg, "sm_90a", bottleneck={"class": cls})
        gate = FirstGate(cls)
        run = apply(store, gate, wl, start, str(folder / "naive.cu"), cfg)
    finally:
        store.close()
    gated = [s for s in run["steps"] if s["kind"] == "candidate"]
    if plan["backend"] is None:
        assert not gated and run["stop_reason"] == plan["stop"]
        return
    assert gated, run["stop_reason"]
    first = gated[0]
    assert (first["backend"], first["skill"], first["kernel_hash"], first["flags"]) == \
        (plan["backend"], plan["skill"], plan["kernel_hash"], plan["flags"])
    assert gate.seen[0] == (plan["kernel_hash"], tuple(plan["flags"]))
    # and the rewrites the run passed over before it are the plan's
    passed = [(s["skill"], s["status"]) for s in run["steps"] if s["kind"] == "materialize"]
    assert passed == [(p["skill"], p["status"]) for p in plan["passed_over"]]


def test_a_matmul_plan_leads_with_the_structural_rewrite_and_lists_its_sweep_axes(library):
    folder = ROOT / "apply_workloads" / "matmul_square_rowx"
    r = CliRunner().invoke(main, ["apply", "--workload", str(folder), "--start", str(folder / "naive.cu"), "--db",
                                  str(library), "--dry-run", "--admission", "off", "--json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    first = plan["first_candidate"]
    assert first["backend"] == "rules" and first["skill"].startswith("smem_tiling/")
    assert plan["first"]["rules"]["skill"] == first["skill"]
    assert set(plan["first_candidate_by_bottleneck"]) == set(CLASSES)
    # the start exposes no tunables; the tiled kernel does, named as the sweep reads them (not BLOCK_...)
    assert plan["sweep_axes"]["start"] == {}
    after = plan["sweep_axes"]["after_first"]
    assert set(after) == {"MM_TILE", "MM_GROUP_M"} and after["MM_TILE"][0] == 32
    text = CliRunner().invoke(main, ["apply", "--workload", str(folder), "--start", str(folder / "naive.cu"), "--db",
                                     str(library), "--dry-run", "--admission", "off"]).output
    assert "gated first: rules smem_tiling/" in text and "sweep axes after smem_tiling" in text
