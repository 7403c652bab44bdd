"""How benchmarks/apply_naive_gpu.py reads a run and which kernels it covers (no record, no GPU); the
GPU record it writes is checked by tests/test_apply_naive_gpu_record.py."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIR = ROOT / "benchmarks" / "results" / "apply_naive"
sys.path.insert(0, str(ROOT / "benchmarks"))

spec = importlib.util.spec_from_file_location("apply_naive_gpu", ROOT / "benchmarks" / "apply_naive_gpu.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


# ---------------------------------------------------------------- the script's reading of a run (no record)

def test_the_best_kernel_is_the_last_kept_steps_final_evaluation():
    steps = [{"kind": "start", "eval_key": "s"},
             {"kind": "candidate", "accepted": True, "remeasure": {"eval_key": "r1"}},
             {"kind": "candidate", "accepted": False, "remeasure": {"eval_key": "x"}},
             {"kind": "candidate", "accepted": True, "remeasure": {"eval_key": "r2"},
              "baked": {"eval_key": "b2", "status": "PASSED"}},
             {"kind": "candidate", "accepted": True, "remeasure": {"eval_key": "r3"},
              "baked": {"eval_key": "b3", "status": "COMPILE_ERROR"}}]
    assert bench._best_eval({"steps": steps}) == "r3"
    assert bench._best_eval({"steps": steps[:4]}) == "b2"
    assert bench._best_eval({"steps": steps[:1]}) == "s"


def test_the_kernels_are_the_four_classes_matrix_products_first():
    names = bench.kernels()
    classes = [bench.kernel_class(n) for n in names]
    assert set(classes) <= {"matmul", "reduction", "softmax", "normalisation"}
    assert classes == sorted(classes, key=list(bench.CLASSES).index)
    assert {"sum_dim1_strided", "rmsnorm_channels", "softmax_wrapped"} <= set(names)


def test_runs_sharing_a_gpu_take_kernels_from_one_queue_and_share_its_lock(monkeypatch, tmp_path):
    seen: list[tuple[str, str, str]] = []

    def fake_one(name, out, env, budget_steps, deadline):
        seen.append((name, env["CUDA_VISIBLE_DEVICES"], env["KLINEAGE_GPU_LOCK"]))
        return {"class": "matmul", "status": "done", "wall_s": 1.0}

    monkeypatch.setattr(bench, "one", fake_one)
    q = bench.Queue()
    for n in ("a", "b", "c"):
        q.put(n)
    first = bench.worker(q, tmp_path, 12, 0.0, "0")
    assert list(first) == ["a", "b", "c"] and bench.worker(q, tmp_path, 12, 0.0, "0") == {}
    assert {(g, lock) for _, g, lock in seen} == {("0", str(tmp_path / "gpu0.lock"))}


def test_a_runs_gpu_time_is_its_evaluations_held_and_waited_seconds(tmp_path):
    import gzip
    import json
    path = tmp_path / "e.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"result": {"wall_s": 1.25, "phases": {"gpu_wait_s": 2.0}}}) + "\n")
        f.write(json.dumps({"result": {"wall_s": 0.5}}) + "\n")  # a run without a lock
    assert bench._gpu_time(path) == {"gpu_s": 1.8, "gpu_wait_s": 2.0}
