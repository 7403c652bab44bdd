"""What a new user still tripped on, each checked: broken kernels stop previews with nvcc's own words
naming the user's file; one list of targets; a mistyped --db fails before anything is loaded; Ctrl-C
says what was stored; workload show lists a ladder; exports are ordinary files; a replay without the
start kernel's record stores no lineage; short options; errors as JSON under --json; skills list --json
in brief."""
from __future__ import annotations

import json
import os
import shutil
import stat
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from klineage.cli import main
from klineage.clidoc import walk
from klineage.gate.compile import ARCHS, named
from klineage.store import open_store

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "skills_db" / "skills.duckdb"
GELU = ROOT / "apply_workloads" / "gelu"
ROW_SUM = ROOT / "expert_kernels" / "row_sum"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    db = tmp_path_factory.mktemp("lib") / "lib.duckdb"
    shutil.copy(SHIPPED, db)
    return db


@pytest.fixture
def broken(tmp_path):
    """The gelu workload with a start kernel that does not compile (line 16)."""
    wl = tmp_path / "gelu"
    shutil.copytree(GELU, wl)
    src = (GELU / "naive.cu").read_text()
    bad = src.replace("float v = __bfloat162float(x[i]);", "float v = __bfloat162float(x[i]) +;")
    assert bad != src
    (wl / "users_gelu.cu").write_text(bad)
    return wl


# -- broken input ------------------------------------------------------------------------------------

def test_nvcc_messages_name_the_users_file():
    log = 'kernel.cu(27): error: expected a ";"\n1 error detected in the compilation of "kernel.cu".'
    assert named(log, "src/softmax.cu") == ('src/softmax.cu(27): error: expected a ";"\n'
                                            '1 error detected in the compilation of "src/softmax.cu".')
    assert named("mykernel.cu(3): x", "a.cu") == "mykernel.cu(3): x"


@pytest.mark.nvcc
def test_features_of_a_broken_kernel_exits_1_with_nvccs_message(broken):
    k = broken / "users_gelu.cu"
    r = run("features", k)
    assert r.exit_code == 1, r.output
    assert f"{k}(16): error: expected an expression" in r.output and "kernel.cu(" not in r.output
    out = json.loads(run("features", k, "--json").output)
    assert out["compiler"]["error_kind"] == "nvcc_error" and out["compiler"]["messages"][0].startswith(f"{k}(16)")


def test_features_takes_the_gates_targets_only():
    r = run("features", ROW_SUM / "expert.cu", "--arch", "bogus")
    assert r.exit_code == 2 and "Invalid value for '--arch'" in r.output
    for name in ("features", "gate", "apply", "mine", "run"):
        cmd = main.commands[name]
        (arch,) = [p for p in cmd.params if p.name == "arch"]
        assert tuple(arch.type.choices) == ARCHS, name


@pytest.mark.nvcc
def test_apply_dry_run_of_a_broken_start_exits_1_with_nvccs_message(broken, lib):
    k = broken / "users_gelu.cu"
    for extra in (["--dry-run"], ["--replay"]):
        r = run("apply", "--workload", broken, "--start", k, "--db", lib, *extra)
        assert r.exit_code == 1, (extra, r.output)
        assert f"the start kernel {k} does not compile" in r.output and f"{k}(16): error" in r.output
    with open_store(lib, read_only=True) as s:
        assert s.apply_runs() == []


@pytest.mark.nvcc
def test_the_gate_shows_nvccs_message_for_the_users_file(broken, tmp_path):
    k = broken / "users_gelu.cu"
    r = run("gate", k, "--db", tmp_path / "g.duckdb", "--quiet")
    assert r.exit_code == 3 and "COMPILE_ERROR" in r.output
    assert f"{k}(16): error: expected an expression" in r.output and "kernel.cu(16)" not in r.output


@pytest.mark.nvcc
def test_a_failed_start_kernel_in_a_real_apply_shows_why(broken, tmp_path):
    from klineage.cli.apply import format_apply_run, start_error
    k = broken / "users_gelu.cu"
    db = tmp_path / "g.duckdb"
    run("gate", k, "--db", db, "--quiet")  # stores the COMPILE_ERROR evaluation, with nvcc's log
    with open_store(db, read_only=True) as s:
        (ev,) = s.find_evaluations()
        run_ = {"run_id": "r", "workload": "gelu", "stop_reason": "start_failed", "summary": {},
                "steps": [{"kind": "start", "seq": 0, "backend": "start", "status": ev["status"], "accepted": False,
                           "eval_key": ev["eval_key"], "error": f"COMPILE_ERROR: {ev['result']['error_message']}"}]}
        run_["start_error"] = start_error(s, run_, str(k))
    text = format_apply_run(run_)
    assert f"the start kernel failed the gate: COMPILE_ERROR: {k}(16): error" in text
    assert f"  {k}(16): error: expected an expression" in text


# -- smaller ---------------------------------------------------------------------------------------

def test_a_mistyped_db_fails_before_the_workload_is_loaded(tmp_path):
    wl = tmp_path / "slow"
    shutil.copytree(GELU, wl)
    with open(wl / "workload.py", "a") as f:
        f.write("\nimport time\ntime.sleep(60)\n")
    t0 = time.monotonic()
    r = run("apply", "--workload", wl, "--start", wl / "naive.cu", "--db", tmp_path / "typo.duckdb")
    assert r.exit_code == 2 and "no database at" in r.output
    assert time.monotonic() - t0 < 30 and not (tmp_path / "typo.duckdb").exists()


def test_ctrl_c_says_what_was_stored(lib, monkeypatch):
    import klineage.cli.apply as apply_cli

    def interrupt(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(apply_cli, "apply_plan", interrupt)
    monkeypatch.setattr("klineage.store.writer._WRITTEN", [])
    r = run("apply", "--workload", GELU, "--start", GELU / "naive.cu", "--db", lib, "--dry-run")
    assert r.exit_code == 130 and "interrupted: nothing was written" in r.output
    monkeypatch.setattr(apply_cli, "execute_apply", interrupt)
    r = run("apply", "--workload", GELU, "--start", GELU / "naive.cu", "--db", lib)
    assert r.exit_code == 130 and f"what was decided before is stored in {lib.resolve()}" in r.output


def test_workload_show_lists_the_ladder():
    r = run("workload", "show", ROW_SUM)
    rungs = sorted(p.name for p in (ROW_SUM / "versions").glob("*.cu"))
    assert r.exit_code == 0 and rungs
    assert all(f"kernel versions/{n}:" in r.output for n in rungs), r.output
    assert "kernel expert.cu:" in r.output and "kernel naive.cu:" in r.output


def test_evals_export_writes_an_ordinary_file(lib, tmp_path):
    old = os.umask(0o022)
    try:
        out = tmp_path / "evals.jsonl.gz"
        r = run("evals", "export", out, "--db", lib, "--quiet")
        assert r.exit_code == 0, r.output
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
    finally:
        os.umask(old)


@pytest.mark.nvcc
def test_a_replay_without_the_start_kernels_record_stores_no_lineage(tmp_path):
    wl = tmp_path / "gelu"
    shutil.copytree(GELU, wl)
    shutil.copy(wl / "naive.cu", wl / "expert.cu")
    db = tmp_path / "new.duckdb"
    r = run("mine", wl, "--replay", "--db", db, "--quiet")
    assert r.exit_code == 4, r.output
    assert "gelu/rules: not walked and not stored: the start kernel's evaluation has no record" in r.output
    assert "NOT REPLAYED (1 evaluations had no record)" in r.output and f"({wl}/expert.cu)" in r.output
    with open_store(db, read_only=True) as s:
        assert s.lineages() == []


def test_short_options_are_the_same_on_every_command():
    short = {"--db": "-d", "--out": "-o", "--quiet": "-q", "--dry-run": "-n", "--config": "-c", "--workload": "-w",
             "--start": "-s"}
    seen = 0
    for path, cmd in walk(main, ["klineage"]):
        opts = [o for p in cmd.params if isinstance(p, click.Option) for o in p.opts]
        assert len(opts) == len(set(opts)), path
        for p in cmd.params:
            if isinstance(p, click.Option):
                for long, s in short.items():
                    if long in p.opts:
                        assert s in p.opts, (path, long)
                        seen += 1
    assert seen >= 20
    r = run("skills", "list", "-d", SHIPPED)
    assert r.exit_code == 0 and "wgmma/warpgroup-mma" in r.output


def test_errors_are_json_under_json(tmp_path):
    for args, code in ((["skills", "list", "--db", tmp_path / "none.duckdb", "--json"], 2),
                       (["skills", "show", "no-such-skill", "-d", SHIPPED, "--json"], 2),
                       (["features", ROW_SUM / "expert.cu", "--arch", "bogus", "--json"], 2)):
        r = run(*args)
        assert r.exit_code == code, r.output
        err = json.loads(r.stdout)
        assert err["exit_code"] == code and err["error"] and err["kind"]


def test_skills_list_json_is_a_summary_unless_full():
    brief = json.loads(run("skills", "list", "-d", SHIPPED, "--json").output)
    full = json.loads(run("skills", "list", "-d", SHIPPED, "--json", "--full").output)
    assert len(brief) == len(full) >= 30
    assert set(brief[0]) == {"skill_id", "name", "mechanism", "median_speedup", "steps", "admission", "platforms"}
    assert "preconditions" in full[0] and full[0]["skill_id"] == brief[0]["skill_id"]
    assert len(json.dumps(brief)) * 20 < len(json.dumps(full))
