"""A pytest plugin that fails the session when a file it guards changed during the run.

tests/conftest.py registers it for the shipped library (skills_db/skills.duckdb, and the write-ahead
log DuckDB would leave beside it): no test may change its bytes, however the change happened (a
read-write open that migrated it, a test writing to it by mistake), and whichever test ran last."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest


def fingerprint(path: Path) -> dict:
    """sha256 of the file and of its DuckDB write-ahead log (None where absent)."""
    out = {}
    for p in (path, path.with_name(path.name + ".wal")):
        out[p.name] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
    return out


class LibraryGuard:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.before: dict | None = None

    def pytest_sessionstart(self, session):
        self.before = fingerprint(self.path)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        after = fingerprint(self.path)
        if self.before is None or after == self.before:
            return
        changed = ", ".join(k for k in after if after[k] != self.before.get(k))
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        msg = (f"{self.path} changed during this test run ({changed}): a test wrote to it; open it read-only "
               f"(open_store(path, read_only=True)) or copy it to tmp_path first, then restore it with "
               f"`git checkout -- {self.path.name}`")
        if tr is not None:
            tr.write_line(msg, red=True, bold=True)
        else:
            print(msg)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
