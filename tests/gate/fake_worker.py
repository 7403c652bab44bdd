"""A scripted stand-in for klineage.gate.worker, for testing the driver's isolation on the CPU.

Behaviour per request comes from the request's so_path: 'ok', 'hang', 'crash', 'fatal', 'slow-progress',
'long-phase' (a phase declaring a 3 s stall limit, silent 1.8 s), 'long-phase-hang', 'long-phase-then-hang'.
"""
import argparse
import json
from pathlib import Path
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--fd", type=int)
ns = ap.parse_args()
out = os.fdopen(ns.fd, "w", buffering=1)
print("noise on stdout must not break the protocol", flush=True)
out.write(json.dumps({"event": "ready", "env": {"gpu": "FakeGPU", "pid": os.getpid()}}) + "\n")
for line in sys.stdin:
    req = json.loads(line)
    if req.get("op") == "exit":
        break
    mode = req.get("so_path")
    if mode == "hang":
        out.write(json.dumps({"event": "progress", "phase": "correctness"}) + "\n")
        time.sleep(3600)
    elif mode == "crash":
        os.kill(os.getpid(), 11)
    elif mode == "write-relative":  # a candidate's host code writing with relative paths and tempfiles
        import tempfile
        Path("escape.txt").write_text("x")
        tmp = tempfile.NamedTemporaryFile(delete=False).name
        out.write(json.dumps({"event": "result", "id": req["id"], "result": {
            "status": "PASSED", "cwd": os.getcwd(), "tmp": tmp, "pid": os.getpid()}}) + "\n")
        continue
    elif mode in ("long-phase", "long-phase-hang", "long-phase-then-hang"):  # a phase declaring its own stall limit
        out.write(json.dumps({"event": "progress", "phase": "reference", "stall_s": 3.0}) + "\n")
        time.sleep(3600 if mode == "long-phase-hang" else 1.8)
        out.write(json.dumps({"event": "progress", "phase": "timing"}) + "\n")
        if mode == "long-phase-then-hang":
            time.sleep(3600)
    elif mode == "slow-progress":
        for _ in range(6):
            out.write(json.dumps({"event": "progress", "phase": "timing"}) + "\n")
            time.sleep(0.3)
    res = {"status": "PASSED", "pid": os.getpid()}
    if mode == "fatal":
        res = {"status": "RUNTIME_ERROR", "error_kind": "cuda_error", "error_message": "illegal address", "fatal": True}
    out.write(json.dumps({"event": "result", "id": req["id"], "result": res}) + "\n")
    if res.get("fatal"):
        sys.exit(4)
