"""The README works as printed, on a CPU machine: in a fresh clone of this repository and a fresh
database, its main command (less the `pip install` steps, which .ci/run does) and then every `$`
command of its ```console blocks run in order, each exiting 0 and printing the lines shown (in that
order; `...` stands for lines left out). No command writes into a tracked file
(skills_db/skills.duckdb above all). The bring-your-own-kernel guide the README links to is followed
as written by tests/test_byok_doc.py.

A ```console block holds `$ COMMAND` lines, each followed by the output it prints (or none); a ```sh
or ```bash block holds commands only."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RECORD = ROOT / "benchmarks" / "results" / "main_job_cpu.json"
MAX_BYTES = 15 * 1024


def main_command(text: str) -> str:
    (line,) = [l.strip() for l in text.splitlines() if "pip install -e ." in l]
    return line


def runnable(text: str) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) from a document's ```console and ```sh/```bash blocks."""
    out: list[tuple[str, list[str]]] = []
    for lang, body in re.findall(r"```(console|sh|bash)\n(.*?)```", text, flags=re.S):
        for line in body.splitlines():
            if lang != "console":
                if line.strip() and not line.lstrip().startswith("#"):
                    out.append((line.strip(), []))
            elif line.startswith("$ "):
                out.append((line[2:].strip(), []))
            elif out:
                out[-1][1].append(line)
    return out


def _shows(expected: list[str], actual: str) -> list[str]:
    """The expected lines (besides `...`) missing from `actual`, read in order."""
    lines = [l.rstrip() for l in actual.splitlines()]
    pos, missing = 0, []
    for want in (w.rstrip() for w in expected):
        if want.strip() in ("", "..."):
            continue
        try:
            pos = lines.index(want, pos) + 1
        except ValueError:
            missing.append(want)
    return missing


def test_readme_is_a_short_manual_with_its_parts():
    text = README.read_text()
    assert len(text.encode()) <= MAX_BYTES, len(text.encode())
    for part in ("## Prerequisites", "## Two commands", "## A five-minute tour", "## Bringing your own kernel",
                 "## Command map", "## Documentation"):
        assert part in text, part
    for doc in ("gate", "mining", "when-knowledge", "apply", "heldout", "llm", "reliability", "results", "cli"):
        assert f"(docs/{doc}.md)" in text and (ROOT / "docs" / f"{doc}.md").is_file(), doc
    assert "(docs/bring-your-own-kernel.md)" in text
    # every relative link resolves inside the repository
    for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (ROOT / link).exists(), link
    assert "bash .ci/run" in text and os.access(ROOT / ".ci" / "run", os.X_OK)
    main = main_command(text)
    assert "skills_db/skills.duckdb" not in main and "--replay" in main
    assert all("skills_db/skills.duckdb" not in c for c, _ in runnable(text))


def test_docs_do_not_narrate_or_date_the_work():
    """Documentation describes the tool as it is: no dated account of what was done."""
    for p in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        if p.name in ("results.md", "cli.md", "heldout.md"):  # generated, or the held-out record's own page
            continue
        text = p.read_text()
        assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), p
        for phrase in ("we did", "so far", "has not been", "was tried", "fixed since", "not yet run", "today"):
            assert phrase not in text.lower(), (p, phrase)


def test_the_main_jobs_figure_is_the_recorded_one():
    """The README's CPU time and memory of the main job are benchmarks/results/main_job_cpu.json's,
    which `python benchmarks/main_job.py measure` regenerates; the record met its goal and rebuilt the
    shipped library."""
    rec = json.loads(RECORD.read_text())
    assert rec["cpu_s"] > 0 and rec["peak_rss_mb"] > 0 and rec["library_equals_shipped"] is True
    want = figure(rec)
    assert want in README.read_text(), f"the README should say {want!r} (from {RECORD.name})"
    assert rec["cpu_s"] <= rec["goal"]["cpu_s"] and rec["peak_rss_mb"] <= rec["goal"]["peak_rss_mb"], rec
    assert rec["nvcc"]["total"]["runs"] == 0, rec["nvcc"]  # the corpus records its compiler evidence


def figure(rec: dict) -> str:
    """How the README words the record's figure."""
    return (f"{rec['cpu_s'] / 60:.1f} CPU-minutes and at most {rec['peak_rss_mb'] / 1024:.2f} GB of memory on "
            f"{rec['machine']['cpus']} cores")


def test_the_tour_shows_what_the_shipped_library_gives(tmp_path):
    """The tour's commands print what it shows against a copy of the shipped library (which the main
    job rebuilds exactly: tests/test_shipped_library.py), checked without running the main job; the
    fresh-clone test below runs the job itself."""
    here = tmp_path / "tour"  # the checkout's folders, and the library the main job would have built
    here.mkdir()
    for name in ("expert_kernels", "pipelines", "apply_workloads", "heldout", "skills_db"):
        (here / name).symlink_to(ROOT / name)
    shutil.copyfile(ROOT / "skills_db" / "skills.duckdb", here / "klineage.duckdb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLINEAGE_")}
    env.update(PYTHONPATH=str(ROOT), KLINEAGE_HOME=str(tmp_path / "home"))
    for cmd, expected in runnable(README.read_text()):
        argv = shlex.split(cmd)
        assert argv[0] == "klineage", cmd
        r = subprocess.run([sys.executable, "-m", "klineage.cli", *argv[1:]], cwd=here, env=env, capture_output=True,
                           text=True, timeout=1800)
        assert r.returncode == 0, (cmd, r.stdout[-3000:], r.stderr[-3000:])
        assert not _shows(expected, r.stdout), (cmd, _shows(expected, r.stdout), r.stdout[-3000:])


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A fresh clone of this repository's committed HEAD, with a clean environment for klineage."""
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    tmp = tmp_path_factory.mktemp("readme")
    repo = tmp / "klineage"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(repo)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLINEAGE_")}
    env.update(PYTHONPATH=str(repo), KLINEAGE_HOME=str(tmp / "home"))
    bindir = tmp / "bin"  # `klineage` resolves to the clone's package
    bindir.mkdir()
    (bindir / "klineage").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m klineage.cli \"$@\"\n")
    (bindir / "klineage").chmod(0o755)
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    return repo, env


def _run(cmd: str, repo: Path, env: dict, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", cmd], cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.nvcc
def test_every_readme_command_works_as_printed(clone):
    repo, env = clone
    text = (repo / "README.md").read_text()
    parts = [p.strip() for p in main_command(text).split("&&")]
    job = " && ".join(p for p in parts if not p.startswith("pip install"))
    assert sum(p.startswith("pip install") for p in parts) == 2, parts  # the install steps are .ci/run's
    r = _run(job, repo, env, 3600)
    assert r.returncode == 0, (job, r.stdout[-3000:], r.stderr[-3000:])
    assert re.search(r"^[0-9a-f]{16}\s+wgmma/warpgroup-mma\s", r.stdout, flags=re.M), r.stdout[-2000:]
    commands = runnable(text)
    assert len(commands) >= 6
    for cmd, expected in commands:
        r = _run(cmd, repo, env, 1800)
        assert r.returncode == 0, (cmd, r.stdout[-3000:], r.stderr[-3000:])
        assert not _shows(expected, r.stdout), (cmd, _shows(expected, r.stdout), r.stdout[-3000:])
    # nothing tracked was written (the shipped library above all), and nothing left untracked: the tour's
    # database and report are ignored, no lock or working copy of a run stays behind
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo, capture_output=True,
                            text=True, check=True).stdout
    assert status == "", status
