"""Fixtures of the executor tests: the small replayed mine's configuration and the serial run's library."""
import json
from pathlib import Path

import pytest

from tests.exec.support import ROOT, WORKLOADS, CONFIG, home, library, mine


@pytest.fixture(scope="session")
def subset_config(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("exec-pipelines") / "pipelines"
    d.mkdir()
    f = d / "subset.toml"
    f.write_text(CONFIG.format(paths=json.dumps([str(ROOT / "expert_kernels" / w) for w in WORKLOADS])))
    return f


@pytest.fixture(scope="session")
def serial_library(subset_config, tmp_path_factory):
    """The serial executor's replayed library: (summary, dump, counts)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("KLINEAGE_HOME", str(home(tmp_path_factory)))
    try:
        db = tmp_path_factory.mktemp("exec-serial") / "lib.duckdb"
        summary = mine(subset_config, db, "--check-builds")  # every kernel built: the executors get compile tasks
    finally:
        mp.undo()
    dump, counts = library(db)
    assert summary["missing"] == [] and dump["lineages"] and dump["skills"]
    assert summary["phases"]["compile_requests"] > 20  # the killed-worker test kills the 20th compile task
    return summary, dump, counts
