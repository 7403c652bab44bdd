"""Crash safety: a replayed `mine` killed with SIGKILL at random points resumes with the same
command, loses no committed evaluation, duplicates nothing, and ends with the same library as an
uninterrupted run; the database file opens cleanly after every kill (DuckDB's WAL, and every write of
ours is one transaction). The kills are placed by the run's own progress (after a random one of the
updates an uninterrupted run prints), and the test asserts that they landed inside runs, some with
the library part-written."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from klineage.store import open_store
from tests.exec.support import CONFIG
from tests.reliability.support import progress_updates, run_until

ROOT = Path(__file__).resolve().parents[2]
KILLS = 5


def _config(tmp: Path) -> Path:
    d = tmp / "pipelines"
    d.mkdir()
    p = d / "small.toml"
    # the executor tests' small run (row_sum, rules and ladder, the whole analysis pass)
    p.write_text(CONFIG.format(paths=json.dumps([str(ROOT / "expert_kernels" / "row_sum")])))
    return p


def _cmd(cfg: Path, db: Path) -> list[str]:
    # with its progress line on stderr (no --quiet, no --json): the kills are placed by it
    return [sys.executable, "-c", "from klineage.cli import main; main()", "mine", "--config", str(cfg),
            "--replay", "--db", str(db)]


def _state(db: Path) -> tuple[list[str], dict]:
    """(evaluation keys, row counts) of a database."""
    store = open_store(db, read_only=True)
    try:
        return [k for (k,) in store._query("SELECT eval_key FROM evaluations")], store.counts()
    finally:
        store.close()


def _dump(db: Path) -> str:
    store = open_store(db, read_only=True)
    try:
        return json.dumps(store.canonical_dump(), sort_keys=True, default=str)
    finally:
        store.close()


@pytest.mark.nvcc
def test_sigkill_at_random_points_then_resume_gives_the_same_library(tmp_path):
    cfg = _config(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ref = tmp_path / "ref.duckdb"
    updates, _ = progress_updates(_cmd(cfg, ref), env, ROOT)
    want = _dump(ref)
    ref_keys, ref_counts = _state(ref)
    assert updates > 2 * KILLS and ref_counts["lineages"] >= 2 and ref_counts["skills"] >= 1

    db = tmp_path / "killed.duckdb"
    rng = random.Random(20261203)
    seen: set[str] = set()
    killed = partial = 0
    for i in range(KILLS):
        # after a random one of the updates (a replay's walks are fast: a few ms later)
        killed += run_until(_cmd(cfg, db), env, ROOT, rng.randint(1, updates - 1), rng.uniform(0.0, 0.02))
        if not db.exists():
            continue
        keys, counts = _state(db)  # the file opens after a kill, and nothing committed before is lost
        assert len(keys) == len(set(keys)), f"kill {i}: an evaluation stored twice"
        assert seen <= set(keys), f"kill {i}: committed evaluations lost"
        seen = set(keys)
        # part-written: some lineage stored, the library not complete
        partial += 0 < counts["lineages"] and (counts["lineages"], counts["skills"]) < (ref_counts["lineages"],
                                                                                      ref_counts["skills"])
    # the kills landed inside runs, and at least one left the library part-written
    assert killed >= KILLS - 1 and partial >= 1, (killed, partial)
    r = subprocess.run(_cmd(cfg, db), cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _dump(db) == want
    keys, _ = _state(db)
    assert len(keys) == len(set(keys)) and set(keys) == set(ref_keys)
