"""What a new user meets first, on a machine without a GPU: `-h` everywhere, the gate's report when it
stops before the GPU, --arch, progress on stderr, id lookup, exports that do not overwrite, tables
with headers, `workload check`, `apply --dry-run` that gates nothing, replay misses that name the
field that differs."""
from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from klineage.cli import main
from klineage.clidoc import walk
from klineage.exec import serial
from klineage.gate import gate as gate_mod
from klineage.gate.compile import CompileResult
from klineage.gate.gate import Gate, GateConfig, arch_needs, kernel_hash
from klineage.lineage.mine import MineConfigError, load_config
from klineage.progress import Progress
from klineage.store import open_store
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "skills_db" / "skills.duckdb"
ROW_SUM = ROOT / "expert_kernels" / "row_sum"
GEMM = ROOT / "expert_kernels" / "gemm"
GELU = ROOT / "apply_workloads" / "gelu"


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    db = tmp_path_factory.mktemp("lib") / "lib.duckdb"
    shutil.copy(SHIPPED, db)
    return str(db)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_dash_h_on_every_command():
    for path, _cmd in walk(main, ["klineage"]):
        r = run(*path[1:], "-h")
        assert r.exit_code == 0 and "Usage:" in r.output, path


# -- the gate without a GPU --------------------------------------------------------------------------

@pytest.mark.nvcc
def test_gate_without_a_gpu_reports_guard_and_build_then_why_it_stops(tmp_path, monkeypatch):
    import klineage.gate.pool as pool
    monkeypatch.setattr(pool, "gpu_available", lambda: False)
    db = tmp_path / "g.duckdb"
    r = run("gate", ROW_SUM / "expert.cu", "--db", db, "--remeasure")
    assert r.exit_code == 1, r.output
    assert "guard: passed" in r.output and "compile: ok for sm_90a" in r.output
    assert re.search(r"ptxas \S+: \d+ regs, \d+ B smem", r.output)
    assert "stopped: no CUDA device found" in r.output and "--replay" in r.output
    # phases on stderr, plain lines (CliRunner is not a terminal)
    assert "[gate] 0/1 · expert.cu: compile" in r.output and "\r" not in r.output and "\x1b" not in r.output
    r = run("gate", ROW_SUM / "expert.cu", "--db", db, "--json")
    assert r.exit_code == 1
    (row,) = json.loads(r.output)
    assert row["status"] is None and row["error_kind"] == "NoDeviceError" and "no CUDA device" in row["error"]
    assert row["guard"]["ok"] and row["compile"]["ok"] and row["compile"]["resources"][0]["registers"] > 0


def test_gate_json_prints_even_when_every_kernel_stops(tmp_path):
    r = run("gate", ROW_SUM / "expert.cu", "--workload", tmp_path, "--db", tmp_path / "g.duckdb", "--json")
    assert r.exit_code == 2
    (row,) = json.loads(r.output)
    assert row["status"] is None and "workload.py" in row["error"]


@pytest.mark.nvcc
def test_gate_replay_of_a_shipped_expert_names_the_mining_configuration(tmp_path):
    r = run("gate", ROW_SUM / "expert.cu", "--replay", "--db", tmp_path / "g.duckdb", "--json")
    assert r.exit_code == 4
    (row,) = json.loads(r.output)
    assert {"reps": 25, "warmup": 5}.items() <= row["differs"]["timing"]["recorded"].items()
    assert {"reps": 50, "warmup": 10}.items() <= row["differs"]["timing"]["asked"].items()
    assert "pass --config pipelines/mine.toml" in row["error"]
    r = run("gate", ROW_SUM / "expert.cu", "--replay", "--db", tmp_path / "g.duckdb", "--config",
            ROOT / "pipelines" / "mine.toml")
    assert r.exit_code == 0 and "PASSED (replayed)" in r.output


def _fake_build(source, arch, flags=(), *a, **k):
    return CompileResult(True, "k" + kernel_hash(source)[:8], arch, list(flags), "13.0, V13.0.88", "", so_path="/nowhere")


@pytest.mark.parametrize("field,change,words", [
    ("flags", {"extra_flags": ("-DROW_SUM_BLOCK=128",)}, "sweep flags: recorded none, asked -DROW_SUM_BLOCK=128"),
    ("round", {"round": 2}, "timing round: recorded none, asked 2"),
    ("timing", {"timing": {"warmup": 10, "reps": 50, "trials": 3, "floor_factor": 0.9}},
     "timing: recorded reps 25, warmup 5, asked reps 50, warmup 10"),
    ("arch", {"arch": "sm_100a"}, "arch: recorded sm_90a, asked sm_100a"),
])
def test_a_replay_miss_names_the_field_that_differs(tmp_path, monkeypatch, field, change, words):
    store = open_store(tmp_path / "t.duckdb")
    store.import_evaluations(ROOT / "skills_db" / "evaluations" / "mine_corpus_h200.jsonl.gz")
    monkeypatch.setattr(serial, "compile_kernel", _fake_build)
    cfg = load_config(ROOT / "pipelines" / "mine.toml")[0].gate_config()
    for k, v in change.items():
        setattr(cfg, k, v)
    with pytest.raises(gate_mod.ReplayMissingError) as e:
        Gate(store, cfg).evaluate((ROW_SUM / "expert.cu").read_text(), load_workload(ROW_SUM), replay=True)
    store.close()
    assert words in str(e.value) and set(e.value.differs) == {field}


# -- --arch ----------------------------------------------------------------------------------------

def test_arch_needs_names_the_instructions_and_targets():
    assert "wgmma" in arch_needs((GEMM / "expert.cu").read_text(), "sm_80")
    assert "only sm_90a builds it" in arch_needs((GEMM / "expert.cu").read_text(), "sm_80")
    assert arch_needs((GEMM / "expert.cu").read_text(), "sm_90a") is None
    assert arch_needs((GELU / "naive.cu").read_text(), "sm_80") is None


def test_workload_show_says_which_kernels_need_sm_90a():
    r = run("workload", "show", GEMM)
    assert r.exit_code == 0 and "kernel expert.cu: the kernel uses wgmma" in r.output and "sm_90a" in r.output
    d = json.loads(run("workload", "show", GELU, "--json").output)
    assert d["kernels"]["naive.cu"] is None


@pytest.mark.nvcc
def test_arch_is_a_setting_carried_into_the_build_and_the_record(tmp_path):
    db = tmp_path / "a.duckdb"
    r = run("gate", GEMM / "expert.cu", "--arch", "sm_80", "--db", db, "--json")
    assert r.exit_code == 3, r.output
    (row,) = json.loads(r.output)
    assert row["status"] == "COMPILE_ERROR" and row["compile"]["arch"] == "sm_80"
    assert "compute_80" in " ".join(row["compile"]["flags"]) and "only sm_90a builds it" in row["error_message"]
    store = open_store(db)
    (rec,) = store.find_evaluations()
    store.close()
    assert rec["request"]["arch"] == "sm_80" and rec["toolchain"]["arch"] == "sm_80"
    # the same kernel for another target is another evaluation and another build
    r = run("gate", GELU / "naive.cu", "--arch", "sm_120", "--db", db, "--json", "--remeasure")
    (row,) = json.loads(r.output)
    assert row["compile"]["arch"] == "sm_120" and row["compile"]["ok"]


def test_gate_arch_in_run_configurations(tmp_path):
    d = tmp_path / "pipelines"
    d.mkdir()
    (tmp_path / "expert_kernels").symlink_to(ROOT / "expert_kernels")
    p = d / "m.toml"
    p.write_text('kind = "mine"\n[gate]\narch = "sm_120"\nreps = 25\n[[target]]\npaths = ["expert_kernels/row_sum"]\n')
    run_, _ = load_config(p)
    cfg = run_.gate_config()
    assert cfg.arch == "sm_120" and cfg.timing["reps"] == 25 and "arch" not in cfg.timing
    p.write_text('kind = "mine"\n[gate]\narch = "sm_99"\n[[target]]\npaths = ["expert_kernels/row_sum"]\n')
    with pytest.raises(MineConfigError, match="gate.arch = 'sm_99': expected one of sm_80"):
        load_config(p)
    assert GateConfig().arch == "sm_90a"


# -- progress ----------------------------------------------------------------------------------------

def test_progress_on_a_terminal_shows_totals_and_eta():
    buf = io.StringIO()
    p = Progress(console=Console(file=buf, force_terminal=True, width=120))
    p.task("walk", "walks", total=4)
    p.update("walk", advance=1, note="PASSED 3")
    p.close()
    out = buf.getvalue()
    assert "1/4" in out and "PASSED 3" in out and re.search(r"\d:\d\d:\d\d", out)  # elapsed / remaining


def test_progress_off_a_terminal_is_plain_lines(capsys):
    p = Progress(console=Console(file=io.StringIO(), force_terminal=False))
    p.task("walk", "walks", total=2)
    p.update("walk", advance=1, note="PASSED 1")
    p.update("walk", note="quiet change")  # no line: nothing moved
    p.update("walk", advance=1)
    p.close()
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("[walks] 1/2 · PASSED 1 · ") and len(err.splitlines()) == 2
    assert "\r" not in err and "\x1b" not in err


def test_quiet_progress_prints_nothing(capsys):
    p = Progress(quiet=True)
    p.task("x", "x", total=1)
    p.update("x", advance=1)
    p.close()
    assert capsys.readouterr().err == ""


def test_report_and_evals_export_print_progress(lib, tmp_path):
    r = run("evals", "export", tmp_path / "e.jsonl.gz", "--db", lib)
    assert r.exit_code == 0 and re.search(r"\[export to .*\] (\d+)/\1", r.output)
    store = open_store(tmp_path / "small.duckdb")
    store.close()
    r = run("report", "--db", lib, "--out", tmp_path / "site")
    assert r.exit_code == 0 and re.search(r"\[report to .*\] (\d+)/\1", r.output)


# -- lookup, tables, exports ---------------------------------------------------------------------------

def test_skills_show_by_mechanism_prefix_and_ambiguous_ids_list_candidates(lib):
    r = run("skills", "show", "wgmma", "--db", lib)
    assert r.exit_code == 0 and r.output.startswith("# wgmma/warpgroup-mma")
    r = run("skills", "show", "vector", "--db", lib)
    assert r.exit_code == 2
    assert "vector_access/global-load" in r.output and "vector_access/global-store" in r.output
    sid = json.loads(run("skills", "show", "wgmma", "--db", lib, "--json").output)["skill_id"]
    assert run("skills", "why", sid[:6], "--db", lib).exit_code == 0


def test_text_listings_have_headers(lib):
    first = lambda r: r.output.splitlines()[0].split()
    assert first(run("skills", "list", "--db", lib))[:3] == ["id", "name", "median"]
    assert first(run("lineage", "list", "--db", lib))[:3] == ["id", "workload", "proposer"]
    r = run("evals", "list", "--db", lib, "--limit", "3")
    assert first(r)[:3] == ["key", "workload", "status"] and len(r.output.splitlines()) == 2 + 3


def test_evals_list_limit_and_status(lib):
    rows = json.loads(run("evals", "list", "--db", lib, "--limit", "5", "--status", "passed", "--json").output)
    assert len(rows) == 5 and {r["status"] for r in rows} == {"PASSED"}
    r = run("evals", "list", "--db", lib, "--status", "FAST")
    assert r.exit_code == 2 and "'FAST' is not one of" in r.output


def test_skills_export_to_an_existing_path_needs_force(lib, tmp_path):
    out = tmp_path / "cards.jsonl"
    assert run("skills", "export", "--format", "jsonl", "--out", out, "--db", lib).exit_code == 0
    r = run("skills", "export", "--format", "jsonl", "--out", out, "--db", lib)
    assert r.exit_code == 2 and "--force" in r.output and "Traceback" not in r.output
    assert run("skills", "export", "--format", "jsonl", "--out", out, "--db", lib, "--force").exit_code == 0
    r = run("skills", "export", "--format", "skill-md", "--out", out, "--db", lib, "--force")
    assert r.exit_code == 2 and "is a file" in r.output
    r = run("skills", "export", "--format", "jsonl", "--out", tmp_path, "--db", lib, "--force")
    assert r.exit_code == 2 and "is a folder" in r.output


# -- workload check --------------------------------------------------------------------------------

def test_workload_check_runs_the_contract_on_a_tiny_cpu_shape():
    r = run("workload", "check", ROW_SUM, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["ok"] and d["shape"] == {"rows": 3, "cols": 7}
    assert [c["function"] for c in d["checks"]] == ["make_inputs", "outputs", "scalars", "reference", "vendor",
                                                   "bytes_moved", "flops"]


@pytest.mark.parametrize("edit,function,words", [
    (("def reference(inputs, shape):\n", "def reference(inputs, shape):\n    raise ValueError('oops')\n"),
     "reference", "raised ValueError: oops"),
    (('return {"out": inputs["x"].double().sum(dim=1)}', 'return {"out": inputs["x"].double().sum(dim=0)}'),
     "reference", "shape"),
    (('return {"x": x.add_(0.25)}', 'return {"x": x.add_(0.25).double()}'), "make_inputs", "ARGS says float32"),
    (('return {"out": inputs["x"].sum(dim=1)}', 'return {"out": inputs["x"].sum(dim=1) + 1}'), "vendor",
     "vendor against reference"),
])
def test_workload_check_names_the_broken_function(tmp_path, edit, function, words):
    d = tmp_path / "w"
    shutil.copytree(ROW_SUM, d, ignore=shutil.ignore_patterns("versions", "__pycache__"))
    text = (d / "workload.py").read_text()
    assert edit[0] in text
    (d / "workload.py").write_text(text.replace(edit[0], edit[1]))
    assert run("workload", "show", d).exit_code == 0  # show only validates the declarations
    r = run("workload", "check", d, "--json")
    assert r.exit_code == 1
    rep = json.loads(r.output)
    (bad,) = [c for c in rep["checks"] if c["result"] == "FAILED"]
    assert bad["function"] == function and words in bad["detail"]


# -- apply --dry-run -----------------------------------------------------------------------------------

def test_apply_dry_run_gates_nothing_for_any_backend(lib, monkeypatch):
    def no_gate(*a, **k):
        raise AssertionError("a dry run evaluated a kernel")
    monkeypatch.setattr(Gate, "evaluate", no_gate)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    store = open_store(lib)
    before = len(store.find_evaluations())
    store.close()
    r = run("apply", "--workload", GELU, "--start", GELU / "naive.cu", "--db", lib, "--dry-run", "--admission", "off",
            "--materializer", "rules", "--materializer", "sweep", "--materializer", "llm", "--json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    assert plan["dry_run"] and plan["retrieved"]
    # the top retrieved skill with a rewrite that applies to gelu's plain elementwise kernel
    assert plan["first"]["rules"]["skill"] == "vector_access/global-load"
    assert plan["first"]["sweep"]["points"] and all("GELU_BLOCK" in p or "GELU_ITEMS_PER_THREAD" in p
                                                    for p in plan["first"]["sweep"]["points"])
    # the llm prompt is the top retrieved skill's card, not the alphabetically first skill's
    top = plan["retrieved"][0]["name"]
    assert plan["first"]["llm"]["skill"] == top and f"# {top}" in plan["prompt"]
    assert "# async_copy/global-to-shared-copy" not in plan["prompt"] or top.startswith("async_copy")
    store = open_store(lib)
    assert len(store.find_evaluations()) == before and store.apply_runs() == []
    store.close()
    r = run("apply", "--workload", GELU, "--start", GELU / "naive.cu", "--db", lib, "--dry-run")
    assert r.exit_code == 0 and "nothing is gated" in r.output and "retrieved skill" in r.output


@pytest.mark.parametrize("folder", [*sorted(p.parent for p in (ROOT / "expert_kernels").glob("*/workload.py")),
                                    *sorted(p.parent for p in (ROOT / "apply_workloads").glob("*/workload.py"))],
                         ids=lambda p: p.name)
def test_every_shipped_workload_passes_its_contract_check(folder):
    from klineage.gate.contract import check_contract
    rep = check_contract(load_workload(folder))
    assert rep["ok"], rep["checks"]


def test_gate_arch_in_apply_and_heldout_pipelines(tmp_path):
    from klineage.gate.gate import gate_config_for
    from klineage.pipelines import PipelineError, load_pipeline
    d = tmp_path / "pipelines"
    d.mkdir()
    (tmp_path / "apply_workloads").symlink_to(ROOT / "apply_workloads")
    p = d / "a.toml"
    p.write_text('kind = "apply"\n[gate]\narch = "sm_80"\nreps = 25\n[apply]\nworkload = "apply_workloads/gelu"\n'
                 'start = "apply_workloads/gelu/naive.cu"\n')
    cfg = gate_config_for(load_pipeline(p).run.gate)
    assert cfg.arch == "sm_80" and cfg.timing["reps"] == 25 and "arch" not in cfg.timing
    p.write_text('kind = "heldout"\n[gate]\narch = "sm_80"\n')
    with pytest.raises(PipelineError, match="unknown key gate.arch"):
        load_pipeline(p)
    r = run("run", ROOT / "pipelines" / "heldout.toml", "--arch", "sm_80", "--db", tmp_path / "h.duckdb")
    assert r.exit_code == 2 and "sm_90a builds" in r.output
