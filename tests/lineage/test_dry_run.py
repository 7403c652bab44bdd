"""`klineage mine PATHS --dry-run [--json]`: every proposer walked with compile-only gating (guard and
nvcc; a kernel that builds is marked "assumed passed"), every proposal printed with the audit's
verdict and reason, nothing stored, and no GPU touched: the gate's worker and its live path raise
here if anything reaches them."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from klineage.cli import main
from klineage.lineage.mine import CompileOnlyGate
from klineage.workload import load_workload
from tests.lineage.test_ladder import kernel, make_ladder

ROOT = Path(__file__).resolve().parents[2]
SWIGLU = ROOT / "expert_kernels" / "swiglu"


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    """Anything that would start a gate worker or measure on a GPU fails the test."""
    def boom(*a, **k):
        raise AssertionError("a dry run reached the GPU path")
    monkeypatch.setattr("klineage.gate.pool.GateWorker.__init__", boom)
    monkeypatch.setattr("klineage.gate.gate.Gate._lookup_or_measure", boom)


def _ladder(tmp_path):
    rungs = {"v1.cu": kernel("restrict"), "v2.cu": kernel("restrict", "unroll", "fast_math")}
    return make_ladder(tmp_path, rungs, kernel(), kernel("restrict", "unroll", "fast_math", "launch_bounds"),
                       'expert_adds = "launch_bounds"\n[steps]\n"v2.cu" = "fast_math"\n')


@pytest.mark.nvcc
def test_a_ladder_and_a_rules_walk_dry(tmp_path):
    d = _ladder(tmp_path)
    db = tmp_path / "never.duckdb"
    r = CliRunner().invoke(main, ["mine", str(d), "--proposer", "versions", "--dry-run", "--json", "--db", str(db)])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    (lin,) = out["lineages"]
    assert out["dry_run"] and "assumed passed" in out["gate"] and not db.exists()
    assert lin["rungs"]["walked"] == lin["rungs"]["total"] == 4 and lin["termination"] == "complete"
    acc = [p for p in lin["proposals"] if p["verdict"] == "accepted"]
    assert [p["mechanism"] for p in acc] == ["launch_bounds", "unroll", "fast_math", "restrict"]
    assert all(p["gate"] == "assumed passed" and p["reason"] for p in acc)
    assert out["compile"]["requests"] >= 4 and out["compile"]["failed"] == 0
    r = CliRunner().invoke(main, ["mine", str(d / "expert.cu"), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "wl/rules from" in r.output or "scale_exp/rules from" in r.output
    assert "accepted  restrict" in r.output and "nothing was run or stored" in r.output


@pytest.mark.nvcc
def test_a_kernel_that_does_not_build_is_refused_at_the_gate(tmp_path):
    d = _ladder(tmp_path)
    (d / "versions" / "v1.cu").write_text(kernel("restrict").replace("return cudaGetLastError();", "return nope;"))
    r = CliRunner().invoke(main, ["mine", str(d), "--proposer", "versions", "--dry-run", "--json"])
    lin = json.loads(r.output)["lineages"][0]
    bad = [p for p in lin["proposals"] if p["verdict"] == "refused"]
    assert bad and bad[0]["stage"] == "compile_error" and bad[0]["rung"] == "v1"
    assert lin["rungs"]["walked"] == 3  # the walk went past v1 to naive


def test_a_misspelt_declaration_stops_before_anything_is_built(tmp_path, monkeypatch):
    d = _ladder(tmp_path)
    (d / "versions" / "ladder.toml").write_text('expert_adds = "launch_bound"\n')
    monkeypatch.setattr("klineage.gate.compile.compile_kernel", lambda *a, **k: pytest.fail("built something"))
    for extra in (["--dry-run"], ["--db", str(tmp_path / "x.duckdb")]):
        r = CliRunner().invoke(main, ["mine", str(d), "--proposer", "versions", *extra])
        assert r.exit_code == 2 and "did you mean launch_bounds?" in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "x.duckdb").exists()


def test_options_that_a_dry_run_cannot_take(tmp_path):
    d = _ladder(tmp_path)
    r = CliRunner().invoke(main, ["mine", str(d), "--dry-run", "--replay"])
    assert r.exit_code == 2 and "leave out --replay" in r.output
    r = CliRunner().invoke(main, ["mine", str(d), "--prompt-only"])
    assert r.exit_code == 2 and "--proposer llm" in r.output


def test_the_compile_only_gate_reports_guard_failures_as_they_are():
    wl = load_workload(SWIGLU)
    res = CompileOnlyGate().evaluate((SWIGLU / "naive.cu").read_text() + "\nvoid f() { cudaDeviceSynchronize(); }\n", wl)
    assert res.status.value == "GUARD_REJECTED" and res.source == "static"


@pytest.mark.nvcc
def test_the_llm_proposer_dry_against_a_scripted_server(tmp_path, monkeypatch):
    from tests.support.scripted_server import ScriptedServer, mine_script
    script = mine_script(SWIGLU)
    server = ScriptedServer(script["replies"], script["default"])
    monkeypatch.setenv("ANTHROPIC_API_KEY", "fake-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    try:
        r = CliRunner().invoke(main, ["mine", str(SWIGLU), "--proposer", "llm", "--dry-run", "--json",
                                      "--budget-usd", "2"])
    finally:
        server.close()
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    (lin,) = out["lineages"]
    assert lin["mechanisms"] == script["expect"]["mechanisms"] and lin["termination"] == "complete"
    stages = [p["stage"] for p in lin["proposals"] if p["verdict"] == "refused"]
    assert stages == ["not_applicable", "audit", "not_applicable", "compile_error"]  # compile-only still builds
    assert out["llm"]["calls"] == len(server.requests) > 0 and "fake-key" not in r.output
