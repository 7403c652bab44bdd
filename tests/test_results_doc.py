"""docs/results.md is generated from the records (klineage.report.results): regenerating it gives the
committed page, and a changed record changes the page."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from klineage.report.results import main, render

ROOT = Path(__file__).resolve().parents[1]


def test_results_page_is_current(capsys):
    assert (ROOT / "docs" / "results.md").read_text() == render(), \
        "docs/results.md is out of date: run `python -m klineage.report.results > docs/results.md`"
    assert main(["--check"]) == 0


def test_the_figures_come_from_the_records(tmp_path):
    res = tmp_path / "benchmarks" / "results"
    shutil.copytree(ROOT / "benchmarks" / "results", res)
    (tmp_path / "skills_db").mkdir()
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", tmp_path / "skills_db" / "skills.duckdb")
    assert render(tmp_path) == render()
    rows = json.loads((res / "corpus_all_h200.json").read_text())
    rows[0]["expert_us"] = 12345.6
    (res / "corpus_all_h200.json").write_text(json.dumps(rows))
    assert "| 12345.6 |" in render(tmp_path) and "| 12345.6 |" not in render()
