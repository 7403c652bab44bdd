"""The apply stage on the H200 (benchmarks/results/apply_h200/, written by
`python benchmarks/apply_h200.py --admission off --budget-steps 8`): three workloads no lineage was
mined from, each from its naive kernel, rules + sweep with the shipped library. The test reads the
record; it measures nothing."""
import gzip
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIR = ROOT / "benchmarks" / "results" / "apply_h200"
RECORD = json.loads((DIR / "apply_h200_admission_off.json").read_text())


def test_every_workload_ends_faster_than_its_start_and_passes_every_shape():
    assert RECORD["env"]["gpu"] == "NVIDIA H200" and RECORD["config"]["materializers"] == ["rules", "sweep"]
    assert set(RECORD["workloads"]) == {"axpby", "gelu", "rope"}
    for name, w in RECORD["workloads"].items():
        assert w["kept"], name  # at least one step kept, after its re-measure in a fresh worker
        assert all(c["speedup"] > 1.01 for c in w["speedup_vs_start"]), name
        final = w["final_gate"]
        assert final["status"] == "PASSED" and final["shapes_passed"] == final["shapes_checked"] >= 9, name
        assert (DIR / f"{name}_best.cu").is_file()


def test_skills_used_are_named_and_exclusions_carry_their_reasons():
    used = {k for w in RECORD["workloads"].values() for k in w["kept"]}
    assert "vector_access/global-store" in used  # a mined skill's forward rewrite, not only a sweep point
    frcp = [e for e in RECORD["workloads"]["axpby"]["excluded"] if e["name"] == "fast_math/math-call-frcp-rn"]
    assert frcp and any("precondition (data_types) fails" in r for r in frcp[0]["reasons"])


def test_the_final_kernels_evaluations_are_in_the_exported_records():
    for name, w in RECORD["workloads"].items():
        keys = {json.loads(line)["eval_key"] for line in gzip.open(DIR / f"apply_h200_{name}.jsonl.gz", "rt")}
        assert w["final_gate"]["eval_key"] in keys, name
