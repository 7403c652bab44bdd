"""Crash safety: a replayed `mine` killed with SIGKILL at random points resumes with the same
command, loses no committed evaluation, duplicates nothing, and ends with the same library as an
uninterrupted run; the database file opens cleanly after every kill (DuckDB's WAL, and every write of
ours is one transaction)."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from klineage.store import open_store
from tests.exec.support import CONFIG

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
    return [sys.executable, "-c", "from klineage.cli import main; main()", "mine", "--config", str(cfg),
            "--replay", "--db", str(db), "--quiet", "--json"]


def _dump(db: Path) -> str:
    store = open_store(db)
    try:
        return json.dumps(store.canonical_dump(), sort_keys=True, default=str)
    finally:
        store.close()


def _eval_keys(db: Path) -> list[str]:
    store = open_store(db)
    try:
        return [k for (k,) in store._query("SELECT eval_key FROM evaluations")]
    finally:
        store.close()


@pytest.mark.nvcc
def test_sigkill_at_random_points_then_resume_gives_the_same_library(tmp_path):
    cfg = _config(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ref = tmp_path / "ref.duckdb"
    t0 = time.monotonic()
    r = subprocess.run(_cmd(cfg, ref), cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    full_s = time.monotonic() - t0
    want = _dump(ref)

    db = tmp_path / "killed.duckdb"
    rng = random.Random(20261203)
    seen: set[str] = set()
    for i in range(KILLS):
        p = subprocess.Popen(_cmd(cfg, db), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 0.9) * full_s)
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=60)
        if db.exists():  # the file opens after a kill, and nothing committed before is lost
            keys = _eval_keys(db)
            assert len(keys) == len(set(keys)), "an evaluation stored twice"
            assert seen <= set(keys), f"kill {i}: committed evaluations lost"
            seen = set(keys)
    r = subprocess.run(_cmd(cfg, db), cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _dump(db) == want
    keys = _eval_keys(db)
    assert len(keys) == len(set(keys)) and set(keys) == set(_eval_keys(ref))
