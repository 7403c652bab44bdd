"""Crash safety of `klineage apply`: a replayed apply run killed with SIGKILL at random points resumes
with the same command, loses no committed step or evaluation, duplicates nothing, and ends with the
same run, the same steps and the same records as an uninterrupted run; the database opens cleanly
after every kill.

No apply evaluations are shipped for replay, so the test records its own first: the real Gate (guard,
nvcc, content-addressed records) runs the apply loop once in this process with a scripted stand-in
for the GPU worker (a test double: its verdicts and latencies are a function of the build key, not
measurements), and the records are exported to a folder that KLINEAGE_RECORDED points the replayed
runs at. The trajectory it gives mixes sweep points and rules, wrong candidates, and faster ones
re-measured in round 2 and kept (a sweep winner baked into the source).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from klineage.store import open_store
from tests.reliability.support import run_until

ROOT = Path(__file__).resolve().parents[2]
GELU = ROOT / "apply_workloads" / "gelu"
SHIPPED = ROOT / "skills_db" / "skills.duckdb"
KILLS = 6
BUDGET = 8


class ScriptedWorker:
    """Stands in for klineage.gate.pool.GateWorker while recording. Every third new build it sees is
    INCORRECT (the same build again, a re-measure, gets the same verdict); the others pass at a latency
    of 60-159 us taken from the build key; the start kernel passes at 120 us."""

    env_info = {"gpu": "scripted worker (test double)", "capability": "9.0"}
    starts = 1

    def __init__(self, start_key: str):
        self.start_key = start_key
        self.verdicts: dict[str, bool] = {}  # build key -> wrong?

    def alive(self) -> bool:
        return True

    def close(self) -> None:
        pass

    def evaluate(self, request: dict, stall_s: float = 60.0, total_s: float = 900.0) -> dict:
        key = Path(request["so_path"]).parent.name  # the build cache's folder is the build key
        h = int(key[:12], 16)
        if key not in self.verdicts:
            self.verdicts[key] = key != self.start_key and (len(self.verdicts) + 1) % 3 == 0
        if self.verdicts[key]:
            return {"status": "INCORRECT", "error_kind": "wrong_values", "error_message": "scripted wrong values",
                    "env": self.env_info, "correctness": [], "wall_s": 0.0}
        lat = 120.0 if key == self.start_key else 60.0 + h % 100
        timing = [{"shape": s["shape"], "latency_us": lat, "trial_medians_us": [lat] * 3, "spread": 0.0,
                   "bandwidth_fraction": 0.5} for s in request["shapes"] if s["kind"] == "benchmark"]
        return {"status": "PASSED", "env": self.env_info, "correctness": [], "timing": timing, "wall_s": 0.0}


def _record(rec_dir: Path, db: Path, monkeypatch) -> None:
    """One apply run through the real Gate with the scripted worker; its records go to rec_dir."""
    import klineage.gate.pool as pool
    from klineage.apply.loop import ApplyConfig, apply
    from klineage.gate.compile import compile_kernel
    from klineage.gate.gate import Gate, GateConfig
    from klineage.workload import load_workload

    wl = load_workload(GELU)
    start = (GELU / "naive.cu").read_text()
    worker = ScriptedWorker(compile_kernel(start).build_key)
    # the round-2 re-measure asks for a fresh worker: it gets the same stand-in
    monkeypatch.setattr(pool, "GateWorker", lambda *a, **k: worker)
    monkeypatch.setattr(pool, "gpu_available", lambda: True)
    shutil.copy(SHIPPED, db)
    store = open_store(db)
    try:
        # the configuration the command below gives (run ids and requests must match)
        cfg = ApplyConfig(materializers=("rules", "sweep"), budget_steps=BUDGET, admission=False)
        run = apply(store, Gate(store, GateConfig(), worker=worker), wl, start, str(GELU / "naive.cu"), cfg)
        kinds = {(s["kind"], s["status"], s["accepted"]) for s in run["steps"]}
        # the trajectory is worth killing: wrong candidates, and faster ones re-measured and kept
        assert {("candidate", "PASSED", True), ("candidate", "INCORRECT", False)} <= kinds, kinds
        n = store.export_evaluations(rec_dir / "apply_gelu_scripted.jsonl", workload_hash=wl.content_hash)
        assert n >= BUDGET
    finally:
        store.close()


def _cmd(db: Path) -> list[str]:
    return [sys.executable, "-c", "from klineage.cli import main; main()", "apply", "--workload", str(GELU),
            "--start", str(GELU / "naive.cu"), "--db", str(db), "--replay", "--admission", "off",
            "--budget-steps", str(BUDGET)]


def _state(db: Path) -> dict:
    """What a run leaves in the database, without clocks (start and end times, wall seconds)."""
    store = open_store(db)
    try:
        runs = []
        for rid, wl, start, best, stop, cfg, summ in store._query(
                "SELECT run_id, workload, start_hash, best_hash, stop_reason, config_json, summary_json FROM apply_runs"):
            s = json.loads(summ) if summ else None
            if s:
                s.pop("wall_s", None)
            runs.append([rid, wl, start, best, stop, json.loads(cfg), s])
        steps = [list(r) for r in store._query("SELECT run_id, seq, skill_id, backend, kernel_hash, eval_key, status, "
                                               "accepted, record_json FROM apply_steps ORDER BY run_id, seq")]
        evals = [k for (k,) in store._query("SELECT eval_key FROM evaluations")]
        kernels = [k for (k,) in store._query("SELECT kernel_hash FROM kernels")]
        return {"runs": sorted(runs), "steps": steps, "evals": evals, "kernels": kernels}
    finally:
        store.close()


def _identity(step_row: list) -> tuple:
    """A step's identity: what was tried and how the gate judged it. Its verdict fields may still be
    rewritten after a kill (a faster candidate is stored, then re-measured and stored again)."""
    run_id, seq, skill_id, backend, khash, ekey, status, _accepted, _record = step_row
    return run_id, seq, skill_id, backend, khash, ekey, status


@pytest.mark.nvcc
def test_apply_killed_at_random_points_resumes_to_the_same_run(tmp_path, monkeypatch):
    rec_dir = tmp_path / "recorded"
    rec_dir.mkdir()
    _record(rec_dir, tmp_path / "recording.duckdb", monkeypatch)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KLINEAGE_RECORDED": str(rec_dir)}

    ref = tmp_path / "ref.duckdb"
    shutil.copy(SHIPPED, ref)
    t0 = time.monotonic()
    r = subprocess.run(_cmd(ref), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    full_s = time.monotonic() - t0
    want = _state(ref)
    assert len(want["runs"]) == 1 and want["runs"][0][4] == "budget_steps" and len(want["steps"]) > BUDGET
    want_steps = {row[1]: _identity(row) for row in want["steps"]}

    db = tmp_path / "killed.duckdb"
    shutil.copy(SHIPPED, db)
    rng = random.Random(20261204)
    seen = {"steps": set(), "evals": set(), "kernels": set()}
    killed, partial = 0, 0
    for i in range(KILLS):
        # two kills in three a few milliseconds after a random step was stored, where the writes are
        # (the first of them leaves a run cut in the middle); the others at a random time
        if i % 3 == 2:
            killed += run_until(_cmd(db), env, ROOT, None, rng.uniform(0.1, 0.9) * full_s)
        else:
            killed += run_until(_cmd(db), env, ROOT, rng.randint(1, len(want["steps"]) - 1), rng.uniform(0.0, 0.03))
        got = _state(db)  # opens after every kill
        assert len(got["evals"]) == len(set(got["evals"])), f"kill {i}: an evaluation stored twice"
        assert len(got["kernels"]) == len(set(got["kernels"])), f"kill {i}: a kernel stored twice"
        assert len(got["runs"]) <= 1, f"kill {i}: the same command made a second run"
        ids = [(row[0], row[1]) for row in got["steps"]]
        assert len(ids) == len(set(ids)), f"kill {i}: a step stored twice"
        # every stored step is the uninterrupted run's step at that place: nothing half-written
        for row in got["steps"]:
            assert want_steps.get(row[1]) == _identity(row), f"kill {i}: step {row[1]} differs from the reference"
        partial += 0 < len(got["steps"]) < len(want["steps"])
        now = {"steps": {_identity(r) for r in got["steps"]}, "evals": set(got["evals"]),
               "kernels": set(got["kernels"])}
        for k in seen:  # nothing committed before is lost
            assert seen[k] <= now[k], f"kill {i}: committed {k} lost"
        seen = now
    assert killed >= KILLS - 1 and partial  # the kills landed inside runs, some in the middle of the steps
    r = subprocess.run(_cmd(db), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    got = _state(db)
    assert got["runs"] == want["runs"] and got["steps"] == want["steps"]
    assert sorted(got["evals"]) == sorted(want["evals"]) and sorted(got["kernels"]) == sorted(want["kernels"])
