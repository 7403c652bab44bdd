"""The command line: output, --json, exit codes and the messages that name the fix."""
import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from klineage.cli import main

from tests.shipped import shipped_workload_dirs

ROOT = Path(__file__).resolve().parents[2]
EXPERTS = sorted(str(p) for d in shipped_workload_dirs() for p in d.glob("*.cu"))


@pytest.fixture
def runner():
    return CliRunner()


def test_version_reports_toolchain(runner):
    r = runner.invoke(main, ["--version"])
    assert r.exit_code == 0
    assert r.output.startswith("klineage ")
    assert "nvcc" in r.output and "GPU" in r.output


def test_workload_show_text_and_json(runner):
    r = runner.invoke(main, ["workload", "show", str(ROOT / "expert_kernels" / "row_sum")])
    assert r.exit_code == 0, r.output
    assert "row_sum" in r.output
    r = runner.invoke(main, ["workload", "show", "--json", str(ROOT / "expert_kernels" / "swiglu")])
    d = json.loads(r.output)
    assert d["name"] == "swiglu"


def test_malformed_workload_names_file_and_field(runner, tmp_path):
    (tmp_path / "workload.py").write_text("NAME = 'w'\n")
    r = runner.invoke(main, ["workload", "show", str(tmp_path)])
    assert r.exit_code == 2  # bad input is a usage error
    assert "workload.py" in r.output and "Error" in r.output


@pytest.mark.nvcc
def test_gate_replay_passes_shipped_records(runner, tmp_path):
    db = tmp_path / "k.duckdb"
    # the corpus's expert and naive kernels were measured by the mining run, with its timing settings
    cfg = ["--config", str(ROOT / "pipelines" / "mine.toml")]
    r = runner.invoke(main, ["gate", *EXPERTS, "--replay", "--db", str(db), *cfg])
    assert r.exit_code == 0, r.output
    assert r.output.count("PASSED (replayed)") == len(EXPERTS)
    assert "NVIDIA H200" in r.output
    r = runner.invoke(main, ["gate", *EXPERTS, "--replay", "--db", str(db), "--json", *cfg])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [x["status"] for x in rows] == ["PASSED"] * len(EXPERTS)
    assert all(x["source"] == "replayed" and x["timing"] for x in rows)
    expert = next(x for x in rows if x["kernel"].endswith("row_sum/expert.cu"))
    assert expert["timing"][0]["bandwidth_fraction"] >= 0.85


@pytest.mark.nvcc
def test_gate_replay_missing_record_names_the_fix(runner, tmp_path):
    src = (ROOT / "expert_kernels" / "row_sum" / "expert.cu").read_text() + "\n// edited\n"
    k = tmp_path / "row_sum_edit.cu"
    k.write_text(src)
    r = runner.invoke(main, ["gate", str(k), "--workload", str(ROOT / "expert_kernels" / "row_sum"),
                             "--replay", "--db", str(tmp_path / "k.duckdb")])
    assert r.exit_code == 4  # a replay that lacks a record
    assert "no recorded evaluation" in r.output and "without --replay" in r.output


@pytest.mark.nvcc
def test_gate_without_gpu_says_how(runner, tmp_path, monkeypatch):
    import klineage.gate.pool as pool
    monkeypatch.setattr(pool, "gpu_available", lambda: False)
    r = runner.invoke(main, ["gate", EXPERTS[0], "--db", str(tmp_path / "k.duckdb"), "--remeasure"])
    assert r.exit_code == 1
    assert "no CUDA device found" in r.output and "--replay" in r.output


def test_guard_rejection_is_a_result_not_a_crash(runner, tmp_path):
    k = ROOT / "tests" / "gallery" / "side_stream.cu"
    r = runner.invoke(main, ["gate", str(k), "--workload", str(ROOT / "expert_kernels" / "row_sum"),
                             "--db", str(tmp_path / "k.duckdb"), "--json"])
    assert r.exit_code == 3, r.output
    rows = json.loads(r.output)
    assert rows[0]["status"] == "GUARD_REJECTED"
    r = runner.invoke(main, ["evals", "list", "--db", str(tmp_path / "k.duckdb"), "--json"])
    assert [x["status"] for x in json.loads(r.output)] == ["GUARD_REJECTED"]


def test_evals_export_import_roundtrip(runner, tmp_path):
    shipped = ROOT / "skills_db" / "evaluations" / "gate_h200.jsonl.gz"
    db1, db2, out = tmp_path / "a.duckdb", tmp_path / "b.duckdb", tmp_path / "e.jsonl"
    r = runner.invoke(main, ["evals", "import", str(shipped), "--db", str(db1)])
    assert r.exit_code == 0 and "imported" in r.output
    n = sum(1 for _ in gzip.open(shipped, "rt"))
    r = runner.invoke(main, ["evals", "import", str(shipped), "--db", str(db1)])
    assert f"0 imported, {n} already present" in r.output
    r = runner.invoke(main, ["evals", "export", str(out), "--db", str(db1)])
    assert f"{n} evaluations" in r.output
    runner.invoke(main, ["evals", "import", str(out), "--db", str(db2)])
    r1 = json.loads(runner.invoke(main, ["evals", "list", "--db", str(db1), "--json"]).output)
    r2 = json.loads(runner.invoke(main, ["evals", "list", "--db", str(db2), "--json"]).output)
    assert r1 == r2 and len(r1) == n


def test_lineage_show_names_the_candidates(runner, tmp_path):
    """An id that names no single lineage lists the ones that could be meant (prefix matches, else all)."""
    import shutil
    db = tmp_path / "lib.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    r = runner.invoke(main, ["lineage", "show", "row_sum", "--db", str(db)])
    assert r.exit_code == 2, r.output
    assert "row_sum/rules" in r.output and "row_sum/versions" in r.output and "swiglu/" not in r.output
    r = runner.invoke(main, ["lineage", "show", "nope", "--db", str(db)])
    assert r.exit_code == 2 and "swiglu/" in r.output and "row_sum/" in r.output
    r = runner.invoke(main, ["lineage", "show", "row_sum/versions", "--db", str(db)])
    assert r.exit_code == 0, r.output
