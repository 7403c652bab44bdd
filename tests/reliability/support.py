"""Shared by the crash-safety tests: run a command and SIGKILL it at a chosen point of its progress."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path

STALL_S = 120.0  # waiting for the n-th update, a run silent this long is killed where it is


def run_until(cmd: list[str], env: dict, cwd: Path, after_updates: int | None, delay_s: float) -> bool:
    """Run `cmd` and SIGKILL it `delay_s` after its `after_updates`-th progress update (the status
    lines on stderr: off a terminal, one plain line each), or `delay_s` after the start when `after_updates` is
    None. True when it was killed while running, False when it ended first."""
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    fd = p.stderr.fileno()
    t0, seen = time.monotonic(), 0
    try:
        while after_updates is None or seen < after_updates:
            left = delay_s - (time.monotonic() - t0) if after_updates is None else STALL_S
            if left <= 0:
                break
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                if after_updates is None:
                    continue
                break  # no update for STALL_S: killed where it stalled
            chunk = os.read(fd, 4096)
            if not chunk:  # ended before the kill point
                p.wait(timeout=60)
                return False
            seen += chunk.count(b"\n")
        if after_updates is not None:
            time.sleep(delay_s)
        if p.poll() is not None:
            return False
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=60)
        return True
    finally:
        p.stderr.close()


def progress_updates(cmd: list[str], env: dict, cwd: Path, timeout: int = 900) -> tuple[int, str]:
    """Run `cmd` to its end; (how many progress updates it printed, its stderr). Fails on a non-zero exit."""
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=timeout)
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0, err[-2000:]
    return r.stderr.count(b"\n"), err
