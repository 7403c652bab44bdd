"""One exit-code table (klineage.errors.ExitCode, printed in `klineage -h` and docs/cli.md), checked
command by command: every command of the CLI has cases here, and a new command without one fails
test_every_command_has_a_case. Ctrl-C exits 130, in process and as a real SIGINT."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from klineage.cli import main
from klineage.clidoc import walk
from klineage.errors import EXIT_CODE_MEANING, ExitCode

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "skills_db" / "skills.duckdb"
ROW_SUM = ROOT / "expert_kernels" / "row_sum"
GELU = ROOT / "apply_workloads" / "gelu"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A copy of the shipped library, a broken kernel, a broken workload and a pipeline of the wrong kind."""
    tmp = tmp_path_factory.mktemp("codes")
    lib = tmp / "lib.duckdb"
    shutil.copy(SHIPPED, lib)
    broken = tmp / "broken.cu"
    broken.write_text((GELU / "naive.cu").read_text().replace("return", "retrun", 1))
    bad_ref = tmp / "bad_ref"
    shutil.copytree(ROW_SUM, bad_ref, ignore=shutil.ignore_patterns("versions", "__pycache__"))
    text = (bad_ref / "workload.py").read_text()
    (bad_ref / "workload.py").write_text(text.replace("def reference(inputs, shape):\n",
                                                      "def reference(inputs, shape):\n    raise ValueError('broken')\n"))
    out = tmp / "existing.jsonl"
    out.write_text("{}\n")
    # the apply demo with its records (replays) and with one timing setting off them (nothing recorded)
    demo = (ROOT / "pipelines" / "apply_gelu.toml").read_text()
    demo = demo.replace('out = "out/apply_gelu"', f'out = "{tmp / "apply_gelu"}"')
    for rel in ('"benchmarks/', '"apply_workloads/'):  # the paths a configuration names are its folder's
        demo = demo.replace(rel, f'"{ROOT}/{rel[1:]}')
    (tmp / "gelu.toml").write_text(demo)
    assert "reps = 25" in demo
    (tmp / "gelu_unrecorded.toml").write_text(demo.replace("reps = 25", "reps = 26"))
    return {"lib": str(lib), "tmp": tmp, "broken": str(broken), "bad_ref": str(bad_ref), "existing": str(out)}


# (command, args after it, expected exit code); {lib}, {tmp}, ... are filled from the fixture
CASES = [
    ("toolchain", [], ExitCode.OK),
    ("gate", [str(ROOT / "tests" / "gallery" / "side_stream.cu"), "--workload", str(ROW_SUM), "--db", "{lib}"],
     ExitCode.VERDICT),
    ("gate", [str(ROW_SUM / "expert.cu"), "--workload", "{tmp}", "--db", "{lib}"], ExitCode.BAD_INPUT),
    ("gate", [str(ROW_SUM / "expert.cu"), "--arch", "sm_99", "--db", "{lib}"], ExitCode.BAD_INPUT),
    ("workload show", [str(ROW_SUM)], ExitCode.OK),
    ("workload show", ["{tmp}"], ExitCode.BAD_INPUT),
    ("workload check", [str(ROW_SUM)], ExitCode.OK),
    ("workload check", ["{bad_ref}"], ExitCode.FAILED),
    ("evals list", ["--db", "{lib}", "--limit", "1"], ExitCode.OK),
    ("evals list", ["--db", "{lib}", "--status", "FAST"], ExitCode.BAD_INPUT),
    ("evals import", ["{broken}", "--db", "{lib}"], ExitCode.BAD_INPUT),
    ("evals export", ["{tmp}", "--db", "{lib}"], ExitCode.BAD_INPUT),
    ("mine", ["--db", "{lib}"], ExitCode.BAD_INPUT),
    ("mine", [str(ROW_SUM), "--replay", "--db", "{tmp}/mine.duckdb"], ExitCode.MISSING),
    ("apply", ["--workload", str(GELU), "--db", "{lib}"], ExitCode.BAD_INPUT),
    ("apply", ["--workload", str(GELU), "--start", "{broken}", "--db", "{lib}"], ExitCode.FAILED),
    ("apply", ["--workload", str(GELU), "--start", str(GELU / "naive.cu"), "--db", "{lib}", "--replay"],
     ExitCode.MISSING),
    ("apply", ["--workload", str(GELU), "--start", str(GELU / "naive.cu"), "--db", "{lib}", "--dry-run"], ExitCode.OK),
    ("apply list", ["--db", "{lib}"], ExitCode.OK),
    ("apply show", ["nope", "--db", "{lib}"], ExitCode.BAD_INPUT),
    ("run", ["{tmp}/gelu.toml", "--db", "{lib}", "--replay"], ExitCode.OK),
    ("run", ["{tmp}/gelu_unrecorded.toml", "--db", "{lib}", "--replay"], ExitCode.MISSING),
    ("run", ["{existing}", "--db", "{lib}"], ExitCode.BAD_INPUT),
    ("heldout", ["--config", str(ROOT / "pipelines" / "mine.toml"), "--db", "{lib}"], ExitCode.BAD_INPUT),
    ("report", ["--db", "{tmp}/empty.duckdb", "--out", "{tmp}/site"], ExitCode.BAD_INPUT),
    ("baseline run", ["--method", "none", "--workload", str(GELU), "--start", str(GELU / "naive.cu")], ExitCode.BAD_INPUT),
    ("lineage list", ["--db", "{lib}"], ExitCode.OK),
    ("lineage show", ["nope", "--db", "{lib}"], ExitCode.BAD_INPUT),
    ("features", [str(ROW_SUM / "expert.cu"), "--source-only"], ExitCode.OK),
    ("features", ["{tmp}/no_such_kernel.cu"], ExitCode.BAD_INPUT),
    ("doctor", ["--db", "{lib}"], ExitCode.OK),
    ("doctor", ["--db", "{tmp}/no_such.duckdb"], ExitCode.BAD_INPUT),
    ("skills list", ["--db", "{lib}"], ExitCode.OK),
    ("skills show", ["wgmma", "--db", "{lib}"], ExitCode.OK),
    ("skills show", ["vector", "--db", "{lib}"], ExitCode.BAD_INPUT),
    ("skills why", ["no-such-skill", "--db", "{lib}"], ExitCode.BAD_INPUT),
    ("skills stats", ["--db", "{lib}"], ExitCode.OK),
    ("skills export", ["--format", "jsonl", "--out", "{existing}", "--db", "{lib}"], ExitCode.BAD_INPUT),
]
# cases that build with nvcc (skipped where it is missing)
NEEDS_NVCC = {("apply", ExitCode.FAILED), ("apply", ExitCode.MISSING), ("mine", ExitCode.MISSING),
              ("gate", ExitCode.VERDICT), ("run", ExitCode.OK), ("run", ExitCode.MISSING)}


def _fill(args: list[str], env: dict) -> list[str]:
    return [a.format(**env) for a in args]


@pytest.mark.parametrize("command,args,code", CASES, ids=[f"{c}-{int(x)}-{i}" for i, (c, _, x) in enumerate(CASES)])
def test_exit_code(env, command, args, code):
    if (command, code) in NEEDS_NVCC and shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    r = CliRunner().invoke(main, [*command.split(), *_fill(args, env)])
    assert r.exit_code == code, f"klineage {command}: exit {r.exit_code}, want {int(code)}\n{r.output[-2000:]}"
    if code != ExitCode.OK:
        assert r.output.strip(), "a failing command says why"
        assert "Traceback" not in r.output


def test_every_command_has_a_case():
    leaves = {" ".join(p[1:]) for p, c in walk(main, ["klineage"]) if len(p) > 1 and
              not (hasattr(c, "commands") and not c.invoke_without_command)}
    covered = {c for c, _, _ in CASES}
    assert leaves - covered == set(), f"add exit-code cases to CASES for {sorted(leaves - covered)}"


def test_the_table_is_in_the_help_and_the_reference():
    r = CliRunner().invoke(main, ["-h"])
    assert r.exit_code == 0
    for text in (r.output, (ROOT / "docs" / "cli.md").read_text()):
        flat = " ".join(text.split())
        for code, meaning in EXIT_CODE_MEANING.items():
            assert " ".join(f"{int(code)} {meaning}".split()) in flat, (int(code), meaning)
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4, 130]


def test_ctrl_c_in_a_command_exits_130(monkeypatch):
    import klineage.cli.kernels as cli  # the toolchain command looks the facts up there

    def interrupted():
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "toolchain_facts", interrupted)
    r = CliRunner().invoke(main, ["toolchain", "--json"])
    assert r.exit_code == 130 and "interrupted" in r.output


@pytest.mark.nvcc
def test_sigint_exits_130(tmp_path):
    """A real SIGINT to a replaying mine run (the corpus: long enough to be interrupted)."""
    db = tmp_path / "m.duckdb"
    proc = subprocess.Popen([sys.executable, "-m", "klineage.cli", "run", str(ROOT / "pipelines" / "mine.toml"),
                             "--replay", "--db", str(db)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = proc.stderr.readline()  # the first progress line: the run is under way
    assert line.startswith("["), line
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err
