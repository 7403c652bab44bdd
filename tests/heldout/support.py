"""Test doubles for the held-out command: a synthetic skill library whose families are known, and a
scripted stand-in for the GPU worker behind the real Gate (guard, nvcc, content-addressed records).

No figure made here is a measurement. The scripted worker's latencies are a function of the kernel's
configuration (its tunables with the sweep's -D flags applied): each fixture instance has a best
configuration, and every step away from it (a factor of two) costs 15%; the reference takes 100 us; a
naive start takes 400 us, less for each structural mechanism a shape rewriter put into it.
Each trial median carries a deterministic jitter of up to +-1.5% taken from a hash of the build, the
worker and the trial, so intervals have width."""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

from klineage.apply.materialize import tunables
from klineage.store import open_store
from tests.support.cards import PLATFORM, case, skill_card

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "heldout"
# the configuration each fixture kernel runs fastest at (the skills of the matching family name it)
BEST = {"rms_tiny": {"RMS_BLOCK": 512, "RMS_UNROLL": 8}, "mm_tiny": {"MM_BLOCK": 128, "MM_UNROLL": 4}}
REFERENCE_US = 100.0


def _card(name: str, mechanism: str, workload: str, example: list[dict], provides: str) -> dict:
    return skill_card(name, mechanism, [case(workload, {"rows": 1024, "cols": 1024}, 1.3)],
                      provides=[["test", provides]], example=example, platform=PLATFORM)


def structural_cards() -> list[dict]:
    """Row-wise structural skills mined (by their cases) from a reduction (row_sum): a shape rewriter
    adds each (klineage.mechanisms.shapes.rowwise)."""
    cards = [_card("block_per_row/kernel-structure", "block_per_row", "row_sum", [], "block_per_row"),
             _card("warp_reduction/warp-reduction", "warp_reduction", "row_sum", [], "warp_reduction"),
             _card("register_cache/kernel-structure", "register_cache", "row_sum", [], "register_cache")]
    for c, sp in zip(cards, (30.0, 1.02, 1.1)):
        c["effects"]["median_speedup"] = sp
        c["effects"]["per_case"][0]["speedup"] = sp
    return cards


def library_cards(structural: bool = False) -> list[dict]:
    """Four skills: two mined (by their cases) from a reduction (row_sum), one from gemm, one from
    transpose. The steering ones name a block size (launch bounds) and an unroll factor. With
    `structural`, the row-wise structural skills of structural_cards() too."""
    return (structural_cards() if structural else []) + [
        _card("red_cfg/block-unroll", "thread_block_cluster", "row_sum",
              [{"name": "ROW_SUM_UNROLL", "value": 8}, {"args": "(512)", "text": "__launch_bounds__(512)"}],
              "thread_block_cluster"),
        _card("gemm_cfg/block-unroll", "thread_block_cluster", "gemm",
              [{"name": "GEMM_UNROLL", "value": 4}, {"args": "(128)", "text": "__launch_bounds__(128)"}],
              "thread_block_cluster"),
        _card("tr_cfg/items", "thread_block_cluster", "transpose",
              [{"name": "TRANSPOSE_ITEMS_PER_THREAD", "value": 2}, {"args": "(64)", "text": "__launch_bounds__(64)"}],
              "thread_block_cluster"),
        _card("restrict/pointer-parameters", "restrict", "row_sum", [], "restrict"),
    ]


def make_library(path: Path, structural: bool = False) -> Path:
    """A DuckDB library holding the synthetic skills (and no lineage)."""
    store = open_store(path)
    try:
        store.put_skills([{"skill_id": c["skill_id"], "name": c["name"], "mechanism": c["mechanism"], "card": c,
                           "card_md": f"# {c['name']}\n"} for c in library_cards(structural)])
    finally:
        store.close()
    return path


def copy_library(src: Path, dst: Path) -> Path:
    shutil.copy(src, dst)
    return dst


def _jitter(*parts) -> float:
    h = int(hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:8], 16)
    return 1.0 + 0.03 * (h / 0xFFFFFFFF - 0.5)


class ScriptedWorker:
    """Stands in for klineage.gate.pool.GateWorker. `builds` maps a shared object's path to the
    (source, flags) it was built from (filled by a wrapper of compile_kernel)."""

    def __init__(self, builds: dict, index: int, broken_vendor: set[str], wrong: callable):
        self.builds, self.index, self.broken_vendor, self.wrong = builds, index, broken_vendor, wrong
        self.env_info = {"gpu": "scripted worker (test double)", "capability": "9.0", "driver": "0.0",
                         "torch": "cpu", "nvcc": "scripted"}
        self.starts = 1

    def alive(self) -> bool:
        return True

    def close(self) -> None:
        pass

    def _instance(self, workload_path: str) -> tuple[str, bool]:
        p = Path(workload_path)
        text = p.read_text()
        if "heldout_fallback" in str(p):  # the generated fallback workload names its instance
            return text.split("the instance ", 1)[1].split(" ", 1)[0], True
        return p.parent.name, False

    def evaluate(self, request: dict, stall_s: float = 60.0, total_s: float = 900.0) -> dict:
        source, flags = self.builds[request["so_path"]]
        cfg = dict(tunables(source))
        for f in flags:
            if f.startswith("-D") and "=" in f:
                k, v = f[2:].split("=", 1)
                cfg[k] = int(v)
        name, fallback = self._instance(request["workload_path"])
        base = {"status": "PASSED", "env": self.env_info, "wall_s": 0.0}
        if self.wrong(name, source, cfg):
            return {**base, "status": "INCORRECT", "error_kind": "wrong_values", "error_message": "scripted wrong values",
                    "correctness": []}
        corr = [{"kind": s["kind"], "shape": s["shape"], "ok": True,
                 "seeds": [{"seed": x, "ok": True, "outputs": {}} for x in request["seeds"]]} for s in request["shapes"]]
        if name in self.broken_vendor and not fallback and request.get("timing"):
            return {**base, "status": "RUNTIME_ERROR", "error_kind": "runtime_error", "correctness": corr,
                    "error_message": f"{name}: cannot import flag_gems.ops (ModuleNotFoundError: No module named "
                                     "'flag_gems'); install the flag-gems wheel with sqlalchemy and greenlet"}
        lat = 100.0 if "naive" not in source else 400.0
        if "naive" in source:  # a naive start a shape rewriter rewrote: each structural mechanism pays
            from klineage.mechanisms.shapes import shape_mechanisms
            lat /= 1.0 + 0.5 * len(shape_mechanisms(source))
        for k, best in BEST.get(name, {}).items():
            if k in cfg:
                lat *= 1.0 + 0.15 * abs(math.log2(cfg[k] / best))
        trials = int(request["timing"]["trials"])
        timing = []
        for s in request["shapes"]:
            if s["kind"] != "benchmark":
                continue
            key = (request["so_path"], json.dumps(s["shape"], sort_keys=True), self.index)
            c = [lat * _jitter(*key, "c", t) for t in range(trials)]
            v = [REFERENCE_US * _jitter(*key, "v", t) for t in range(trials)]
            cm, vm = sorted(c)[trials // 2], sorted(v)[trials // 2]
            timing.append({"shape": s["shape"], "latency_us": cm, "vendor_latency_us": vm, "trial_medians_us": c,
                           "vendor_trial_medians_us": v, "speedup_vs_vendor": vm / cm,
                           "spread": (max(c) - min(c)) / cm, "bandwidth_fraction": 0.5})
        return {**base, "correctness": corr, "timing": timing}


def script_gpu(monkeypatch, broken_vendor=(), wrong=None) -> dict:
    """Route the real Gate's live path to ScriptedWorker instances (one per worker the gate starts);
    returns the state: {"builds", "workers"}."""
    import klineage.exec.serial as serial
    import klineage.gate.pool as pool
    from klineage.gate.compile import compile_kernel

    state = {"builds": {}, "workers": []}

    def compile_and_note(source, arch="sm_90a", extra_flags=(), *a, **kw):
        res = compile_kernel(source, arch, extra_flags, *a, **kw)
        if res.ok:
            state["builds"][res.so_path] = (source, tuple(extra_flags))
        return res

    def new_worker(*a, **kw):
        w = ScriptedWorker(state["builds"], len(state["workers"]), set(broken_vendor),
                           wrong or (lambda name, source, cfg: False))
        state["workers"].append(w)
        return w

    monkeypatch.setattr(serial, "compile_kernel", compile_and_note)
    monkeypatch.setattr(pool, "GateWorker", new_worker)
    monkeypatch.setattr(pool, "gpu_available", lambda: True)
    return state


def klineage_cli(args: list[str], cwd: Path, checkout: Path = ROOT) -> subprocess.CompletedProcess:
    """`klineage ARGS` run from `cwd` with the package of `checkout` (a fresh clone's own code)."""
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "KLINEAGE_EXPERTS")}
    env["PYTHONPATH"] = str(checkout)
    return subprocess.run([sys.executable, "-m", "klineage.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=1800)
