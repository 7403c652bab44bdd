"""The mutation record (benchmarks/mutation.py, benchmarks/results/mutation.json): every check the
evidence rests on was mutated, at least 90% of each target's mutants were killed by its tests, and
every one that was not is explained as equivalent (changing nothing the code can observe), with the
reason the script keeps for it. The record is read here; the run itself takes minutes, not CI's time."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "results" / "mutation.json"
sys.path.insert(0, str(ROOT / "benchmarks"))
import mutation as bench  # noqa: E402

RECORD_IT = "run `pip install -e '.[mutation]' && python benchmarks/mutation.py --out benchmarks/results` (about 20 minutes)"
DETECTED = {"killed", "timeout"}  # a mutant whose tests fail, or never finish


@pytest.fixture(scope="module")
def record() -> dict:
    assert RECORD.is_file() and RECORD.stat().st_size > 0, f"{RECORD.name} is missing or empty: {RECORD_IT}"
    rec = json.loads(RECORD.read_text())
    assert rec.get("targets"), f"{RECORD.name} holds no target: {RECORD_IT}"
    return rec


def test_every_target_was_mutated_with_its_tests(record):
    got = {t["name"]: t for t in record["targets"]}
    assert set(got) == {t.name for t in bench.TARGETS}, f"targets missing from the record: {RECORD_IT}"
    for t in bench.TARGETS:
        r = got[t.name]
        assert r["module"] in t.module and r["functions"] == t.functions and r["tests"] == t.tests, (t.name, RECORD_IT)
        assert r["mutants"] and r["mutmut_rc"] == 0 and (ROOT / r["module"]).is_file(), t.name
        assert not any(m["status"] == "not checked" for m in r["mutants"]), t.name
    assert record["tool"].startswith("mutmut ")


@pytest.mark.parametrize("target", [t.name for t in bench.TARGETS])
def test_at_least_90_percent_killed_and_the_rest_equivalent(record, target):
    r = next(t for t in record["targets"] if t["name"] == target)
    detected = [m for m in r["mutants"] if m["status"] in DETECTED]
    rest = [m for m in r["mutants"] if m["status"] not in DETECTED]
    assert len(detected) >= 0.9 * len(r["mutants"]), (target, len(detected), len(r["mutants"]))
    unexplained = [m for m in rest if m["status"] != "equivalent" or not m.get("why")]
    assert not unexplained, [(m["name"], m["status"], m.get("change")) for m in unexplained]
    for m in rest:  # the reason is the one the script keeps for that change
        assert bench.EQUIVALENT[(target, tuple(m["change"]))] == m["why"], m["name"]


def test_the_summary_counts_the_mutants(record):
    every = [m for t in record["targets"] for m in t["mutants"]]
    assert record["summary"]["mutants"] == len(every)
    for status in {m["status"] for m in every}:
        assert record["summary"][status] == sum(m["status"] == status for m in every)


def test_the_mutant_names_of_a_function_and_of_a_method():
    assert bench.mangled("klineage/lineage/walk.py", "rederive_trials") == "klineage.lineage.walk.x_rederive_trials__mutmut_*"
    assert bench.mangled("klineage/workload.py", "Workload.check") == "klineage.workload.x\u01c1Workload\u01c1check__mutmut_*"
    diff = "--- a\n+++ b\n@@ -1 +1 @@\n-    x = 1\n+    x = 2\n unchanged\n"
    assert bench.change_of(diff) == ("-x = 1", "+x = 2")
