"""`.ci/run` without nvcc on PATH stops at once with one line saying so (exit 2), before it installs
anything: without nvcc the compile and replay tests would all skip and the run would look green."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_run_stops_without_nvcc(tmp_path):
    bin_dir = tmp_path / "bin"  # bash and the few tools the script's first lines use, and no nvcc
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "env"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    r = subprocess.run([str(bin_dir / "bash"), str(ROOT / ".ci" / "run")], env={"PATH": str(bin_dir)},
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == "" and r.stderr.strip().count("\n") == 0
    assert "nvcc is not on PATH" in r.stderr
