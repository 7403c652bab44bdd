"""A built wheel works outside the checkout: it carries the corpus (settings.CORPUS) under
klineage/corpus/, the package's own data files, and runs a command from an empty folder.

The wheel is built offline (pip wheel --no-build-isolation, the installed setuptools) from a copy of
the files a build reads; the test is skipped when pip cannot build here. The full check, a fresh
venv and the README's main job from an empty folder, is the command in docs/install.md.
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from klineage import settings

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("klineage", *settings.CORPUS):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.skip(f"pip cannot build a wheel here: {proc.stderr.strip()[-300:]}")
    (whl,) = (tmp / "dist").glob("klineage-*.whl")
    return whl


def test_setup_and_settings_name_the_same_corpus():
    tree = ast.parse((ROOT / "setup.py").read_text())
    (value,) = [ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                and [getattr(t, "id", None) for t in n.targets] == ["CORPUS"]]
    assert value == settings.CORPUS


def test_the_wheel_carries_the_corpus_and_the_package_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for must in ("klineage/corpus/pipelines/mine.toml", "klineage/corpus/skills_db/skills.duckdb",
                 "klineage/corpus/skills_db/compile_checks.jsonl", "klineage/corpus/expert_kernels/row_sum/expert.cu",
                 "klineage/corpus/expert_kernels/row_sum/workload.py", "klineage/cli/__main__.py",
                 "klineage/llm/session.py", "klineage/apply/prompts/materialize.j2",
                 "klineage/parse/queries/calls.scm"):
        assert must in names, must
    recorded = [n for n in names if n.startswith("klineage/corpus/skills_db/evaluations/")]
    want = [p for p in (ROOT / "skills_db" / "evaluations").rglob("*") if p.is_file()]
    assert len(recorded) == len(want) > 0
    assert not any(n.startswith("tests/") for n in names)


def test_the_installed_package_runs_from_an_empty_folder(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLINEAGE_")}
    env["PYTHONPATH"] = str(site)
    env["KLINEAGE_HOME"] = str(tmp_path / "home")
    where = subprocess.run([sys.executable, "-c", "import klineage, klineage.settings as s; "
                            "print(klineage.__file__); print(s.repo_root())"],
                           cwd=empty, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    pkg, root = where.stdout.split()
    assert Path(pkg).is_relative_to(site) and Path(root) == (site / "klineage" / "corpus").resolve()
    shipped = site / "klineage" / "corpus" / "skills_db" / "skills.duckdb"
    r = subprocess.run([sys.executable, "-m", "klineage.cli", "skills", "list", "--db", str(shipped), "--json"],
                       cwd=empty, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert '"skill_id"' in r.stdout
    # the shipped pipeline is found by its path in the corpus, from a folder that has none
    r = subprocess.run([sys.executable, "-m", "klineage.cli", "run", "pipelines/nope.toml", "--db", "x.duckdb"],
                       cwd=empty, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "'pipelines/nope.toml' does not exist" in r.stderr
    assert list(empty.iterdir()) == []
