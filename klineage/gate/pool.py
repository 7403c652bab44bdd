"""Driver side of the gate worker: start one worker subprocess per GPU, send it requests, and turn a
hang or crash into a TIMEOUT / RUNTIME_ERROR result, replacing the worker.

Time limits are enforced by killing the worker's whole process group (SIGKILL), never by waiting
on a future: a kernel spinning forever cannot hold the driver.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from klineage.errors import NoDeviceError


class GateWorker:
    """One worker process pinned to one GPU (CUDA_VISIBLE_DEVICES)."""

    def __init__(self, gpu: int | str = 0, start_timeout_s: float = 180.0, command: list[str] | None = None):
        self.gpu = str(gpu)
        # The worker program; tests substitute a scripted one.
        self.command = command or [sys.executable, "-m", "klineage.gate.worker"]
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.env_info: dict | None = None
        self.starts = 0
        self._rfd = None
        self._buf = b""
        self._log = None
        self._next_id = 0
        self._workdir: str | None = None

    # -- process management ------------------------------------------------------------------
    def start(self) -> dict:
        """Start the worker and wait for it to report its device; returns the environment."""
        rfd, wfd = os.pipe()
        # Candidates run in a working directory of their own (a fresh one per worker process, removed
        # when it is killed), with TMPDIR inside it: relative paths and temp files of a candidate's
        # host code land there, never in the repository or the library's folders.
        self._workdir = tempfile.mkdtemp(prefix="klineage-run-")
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=self.gpu, PYTHONUNBUFFERED="1", TMPDIR=self._workdir,
                   PYTHONPATH=os.pathsep.join([root] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x]))
        # The worker's output goes to a log inside its working directory (removed with it); the driver
        # keeps only the name, so a restart leaks neither a file nor a descriptor.
        log = tempfile.NamedTemporaryFile(prefix="klineage-worker-", suffix=".log", dir=self._workdir, delete=False)
        self._log = log.name
        try:
            self.proc = subprocess.Popen(
                [*self.command, "--fd", str(wfd)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, pass_fds=(wfd,), env=env,
                start_new_session=True, cwd=self._workdir,
            )
        finally:
            log.close()
            os.close(wfd)
        self._rfd, self._buf = rfd, b""
        self.starts += 1
        msg = self._read(self.start_timeout_s)
        if msg is None or msg.get("event") != "ready":
            tail = self.log_tail()
            self.kill()
            detail = msg.get("error_message") if msg else "no answer"
            raise NoDeviceError(f"gate worker on GPU {self.gpu} did not start ({detail}); "
                                f"run on a machine with a CUDA GPU or pass --replay. Log tail: {tail[-400:]}")
        self.env_info = msg["env"]
        return self.env_info

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        if self._workdir is not None:
            import shutil
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        if self._rfd is not None:
            os.close(self._rfd)
            self._rfd = None
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        self.proc = None

    def close(self) -> None:
        if self.alive():
            try:
                self.proc.stdin.write(b'{"op": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (BrokenPipeError, subprocess.TimeoutExpired, OSError):
                pass
        self.kill()

    def log_tail(self, n: int = 2000) -> str:
        if self._log is None:
            return ""
        try:
            return Path(self._log).read_text(errors="replace")[-n:]
        except OSError:
            return ""

    # -- messages ----------------------------------------------------------------------------
    def _read(self, timeout_s: float) -> dict | None:
        """Next message, or None when the worker died or said nothing for timeout_s."""
        deadline = time.monotonic() + timeout_s
        sel = selectors.DefaultSelector()
        sel.register(self._rfd, selectors.EVENT_READ)
        try:
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(timeout=left):
                    return None
                chunk = os.read(self._rfd, 1 << 16)
                if not chunk:  # EOF: the worker is gone; reap it so alive() is false
                    if self.proc is not None:
                        try:
                            self.proc.wait(timeout=10)
                        except subprocess.TimeoutExpired:
                            pass
                    return None
                self._buf += chunk
        finally:
            sel.close()
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def evaluate(self, request: dict, stall_s: float = 60.0, total_s: float = 900.0) -> dict:
        """Run one evaluation. A worker silent for stall_s (no heartbeat; a phase whose progress
        message names its own "stall_s", the reference's first call, gets that) or busy past total_s
        is killed and the result is TIMEOUT; a worker that dies is RUNTIME_ERROR. Either way the
        worker is restarted lazily on the next request."""
        if not self.alive():
            self.start()
        self._next_id += 1
        req = dict(request, op="evaluate", id=self._next_id)
        t0 = time.monotonic()
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.kill()
            return self._died("worker pipe closed before the request", t0)
        last_phase, stall = "start", stall_s
        while True:
            left_total = total_s - (time.monotonic() - t0)
            msg = self._read(min(stall, max(0.1, left_total)))
            if msg is None:
                if self.alive():
                    self.kill()
                    why = (f"no progress for {stall:.0f} s in phase {last_phase}" if left_total > stall
                           else f"evaluation ran past {total_s:.0f} s")
                    return {"status": "TIMEOUT", "error_kind": "timeout",
                            "error_message": f"{why}; the worker was killed and will be replaced",
                            "wall_s": time.monotonic() - t0, "worker_restarted": True}
                return self._died(f"worker died in phase {last_phase}", t0)
            if msg.get("event") == "progress":
                last_phase = msg.get("phase", last_phase)
                stall = max(stall_s, float(msg.get("stall_s") or 0.0))
                continue
            if msg.get("event") == "result" and msg.get("id") == req["id"]:
                res = msg["result"]
                if res.get("fatal"):
                    self.kill()
                    res["worker_restarted"] = True
                return res

    def _died(self, why: str, t0: float) -> dict:
        code = self.proc.returncode if self.proc is not None else None
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        sig = f" (signal {signal.Signals(-code).name})" if isinstance(code, int) and code < 0 else ""
        tail = self.log_tail(600)
        self.kill()
        return {"status": "RUNTIME_ERROR", "error_kind": "worker_crash",
                "error_message": f"{why}: exit code {code}{sig}; log tail: {tail.strip()[-400:]}",
                "wall_s": time.monotonic() - t0, "worker_restarted": True}


def gpu_available() -> bool:
    """Whether a CUDA device is visible, checked without initialising CUDA in this process."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout
