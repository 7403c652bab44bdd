"""No line of default text output is wider than 160 characters: the README tour's commands (against a
copy of the shipped library, which the main job rebuilds exactly), their dry runs, and every lineage and
skill the library holds shown each way a person reads it."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from klineage.cli import main
from klineage.report.text import WIDTH, format_lineage, format_skill_why, skill_why, wrap_markdown
from klineage.store import open_store

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "skills_db" / "skills.duckdb"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    d = tmp_path_factory.mktemp("width") / "klineage.duckdb"
    shutil.copyfile(SHIPPED, d)
    return d


def _wide(args: list[str]) -> list[str]:
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, (args, r.output[-2000:])
    return [line for line in r.stdout.splitlines() if len(line) > WIDTH]


def test_listings_and_every_card_and_lineage(db):
    cmds = [["skills", "list"], ["skills", "stats"], ["lineage", "list"], ["evals", "list", "--limit", "50"],
            ["doctor"], ["lineage", "show", "row_sum/versions"], ["skills", "show", "wgmma"], ["skills", "why", "wgmma"]]
    wide = {" ".join(c): w[:2] for c in cmds if (w := _wide([*c, "--db", str(db)]))}
    # every lineage and card of the library, through the same formatting as `lineage show`, `skills show`
    # and `skills why`
    with open_store(db, read_only=True) as s:
        for lin in s.lineages():
            wide.update({lin["lineage_id"]: w[:2] for w in [_long(format_lineage(lin))] if w})
        for k in s.skills():
            for what, text in (("show", wrap_markdown(k["card_md"])), ("why", format_skill_why(skill_why(k["card"])))):
                wide.update({f"{what} {k['name']}": w[:2] for w in [_long(text)] if w})
    assert not wide, wide


def _long(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH]


@pytest.mark.nvcc
def test_the_tour_and_its_dry_runs(db, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the commands as the README gives them, from the repository root
    cmds = [["gate", "expert_kernels/row_sum/expert.cu", "--config", "pipelines/mine.toml", "--replay", "--quiet"],
            ["apply", "--workload", "apply_workloads/gelu", "--start", "apply_workloads/gelu/naive.cu", "--dry-run"],
            ["report", "--out", str(tmp_path / "report"), "--quiet"],
            ["heldout", "--dry-run"],
            ["features", "expert_kernels/row_sum/expert.cu"],
            ["workload", "show", "expert_kernels/row_sum"]]
    wide = {}
    for c in cmds:
        needs_db = c[0] in ("gate", "apply", "report", "heldout")
        w = _wide([*c, *(["--db", str(db)] if needs_db else [])])
        if w:
            wide[" ".join(c)] = w[:2]
    assert not wide, wide
