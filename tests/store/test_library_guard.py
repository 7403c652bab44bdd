"""The session guard of tests/conftest.py (tests/library_guard.py): a test run that changes the
guarded file fails, even when every test passed and whichever test changed it; a run that leaves it
alone is unaffected. Shown on a scratch file in a pytest session of its own."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(ROOT)!r})
from tests.library_guard import LibraryGuard

def pytest_configure(config):
    config.pluginmanager.register(LibraryGuard(Path(__file__).parent / "lib.duckdb"), "guard")
"""


def _session(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    (tmp_path / "lib.duckdb").write_bytes(b"the library")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(f"from pathlib import Path\n\ndef test_inner():\n    {body}\n")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_a_run_that_changes_the_library_fails(tmp_path):
    r = _session(tmp_path, 'Path(__file__).with_name("lib.duckdb").write_bytes(b"rewritten")')
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 passed" in r.stdout and "lib.duckdb changed during this test run" in r.stdout


def test_a_write_ahead_log_left_beside_it_is_a_change(tmp_path):
    r = _session(tmp_path, 'Path(__file__).with_name("lib.duckdb.wal").write_bytes(b"x")')
    assert r.returncode == 1 and "lib.duckdb.wal" in r.stdout, r.stdout


def test_a_run_that_only_reads_it_passes(tmp_path):
    r = _session(tmp_path, 'assert Path(__file__).with_name("lib.duckdb").read_bytes() == b"the library"')
    assert r.returncode == 0, r.stdout + r.stderr
