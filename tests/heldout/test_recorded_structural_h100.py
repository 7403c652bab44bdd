"""The 22-instance held-out check with structural rewrites (pipelines/heldout_structural.toml: idiom,
skills, control-random, control-foreign, control-structural, the idiom arm of reductions) as recorded
on the GPU in resumable device calls (benchmarks/results/heldout_structural_h100/, docs/heldout.md):
the record is complete (every instance under every condition, one GPU model, no row missing), its
report is the replay of the records byte for byte from another folder, and the documentation states
the report's tables and the device time each family took, as generated from the records."""
from __future__ import annotations

import json
import shutil
import sys

from tests.heldout.support import ROOT, klineage_cli

RECORDS = ROOT / "benchmarks" / "results" / "heldout_structural_h100"
PIPELINE = ROOT / "pipelines" / "heldout_structural.toml"
CONDITIONS = ("idiom", "skills", "control-random", "control-foreign", "control-structural")


def _report() -> dict:
    f = RECORDS / "report" / "heldout.json"
    assert f.is_file() and sorted(RECORDS.glob("heldout_h*_call*.jsonl.gz")), (
        f"no recorded run in {RECORDS}: run the device calls of docs/heldout.md (benchmarks/heldout_h200_call.sh "
        "callk --config pipelines/heldout_structural.toml --seed-recorded benchmarks/results/heldout_structural_h100 "
        "--time-limit 470), then write report/ by the replay")
    return json.loads(f.read_text())


def test_the_record_holds_every_instance_under_every_condition_on_one_gpu():
    rep = _report()
    assert len(rep["instances"]) == 22 and not rep["missing"]
    assert len({e["gpu"] for e in rep["environment"]}) == 1
    for inst in rep["instances"]:
        for c in CONDITIONS:
            row = inst["conditions"][c]
            assert row["status"] in ("PASSED", "FAILED"), (inst["instance"], c, row.get("reason"))
            if c != "idiom":
                assert len(row["budget_curve"]) == rep["config"]["budget"] + 1
    assert rep["config"]["structural"] and rep["config"].get("idiom_arm")
    assert rep["summary"]["budget_curves"]["overall"].keys() >= set(CONDITIONS) - {"idiom"}


def test_the_report_is_the_replay_of_the_records(tmp_path):
    want = RECORDS / "report"
    _report()
    db = tmp_path / "lib.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = klineage_cli(["heldout", "--config", str(PIPELINE), "--db", str(db), "--replay", "--out", str(tmp_path / "out"),
                      "--quiet"], elsewhere)
    assert r.returncode == 0, r.stderr[-3000:]
    for name in ("heldout.txt", "heldout.json"):
        assert (tmp_path / "out" / name).read_bytes() == (want / name).read_bytes(), name
    assert json.loads((tmp_path / "out" / "replay_check.json").read_text())["same"]


def test_the_documentation_states_the_records_tables_and_device_time():
    from klineage.report.text import budget_curves_markdown, heldout_markdown
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import heldout_h200
    rep = _report()
    doc = (ROOT / "docs" / "heldout.md").read_text()
    assert heldout_markdown(rep) in doc
    assert budget_curves_markdown(rep) in doc
    assert heldout_h200.wall_table(RECORDS) in doc
