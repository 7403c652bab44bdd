"""Helpers of the executor tests: a small replayed mine (row_sum, rules and ladder, with the analysis
pass) and the serial run's library to compare every executor's with."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from klineage.cli import main
from klineage.store import open_store

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ["row_sum"]

CONFIG = """kind = "mine"
name = "executor-subset"
[limits]
max_steps = 64
max_rejections = 48
min_rederive_ratio = 0.99
[gate]
warmup = 5
reps = 25
trials = 3
[analysis]
rounds = 2
probes = true
static = true
scope = true
admission = true
admission_rewrites = "mechanical"
[[target]]
paths = {paths}
proposer = "rules"
[[target]]
paths = {paths}
proposer = "versions"
"""


def home(tmp_path_factory) -> Path:
    """The session's KLINEAGE_HOME (tests/conftest.py sets it per test; session fixtures and Ray
    workers, which start before that, are given it explicitly)."""
    return tmp_path_factory.getbasetemp() / "klineage-home"


def library(db: Path) -> tuple[dict, dict]:
    """(canonical dump, row counts) of a database."""
    store = open_store(db)
    try:
        return json.loads(json.dumps(store.canonical_dump(), sort_keys=True, default=str)), store.counts()
    finally:
        store.close()


def mine(config: Path, db: Path, *extra: str) -> dict:
    r = CliRunner().invoke(main, ["mine", "--config", str(config), "--db", str(db), "--replay", "--json", *extra])
    assert r.exit_code == 0, r.output[-3000:]
    return json.loads(r.output)
