"""How benchmarks/apply_naive_gpu.py reads a run and which kernels it covers (no record, no GPU); the
GPU record it writes is checked by tests/check_apply_naive_record.py."""
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
