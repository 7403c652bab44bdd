"""The held-out check with structural rewrites and every control (pipelines/heldout_structural.toml)
as run on an NVIDIA H100 (benchmarks/results/heldout_structural_h100/), family by family: each
family, every instance under idiom, skills, control-random, control-foreign and control-structural,
replays on this machine, from another folder, to its report_FAMILY/ byte for byte, and the verdicts
docs/heldout.md and the README state are the records'. The whole record's check (all 22 instances in
one report, the documentation's tables) is tests/heldout/test_recorded_structural_h100.py."""
from __future__ import annotations

import gzip
import json
import shutil

import pytest

from tests.heldout.support import ROOT, klineage_cli

H100 = ROOT / "benchmarks" / "results" / "heldout_structural_h100"
PIPELINE = ROOT / "pipelines" / "heldout_structural.toml"
CONDITIONS = {"idiom", "skills", "control-random", "control-foreign", "control-structural"}
FAMILIES = {"gemm": 8, "attention": 6, "reduction": 8}  # family -> instances
CALL_S = 540  # a device call of nine minutes


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_complete_family_replays_to_its_report(tmp_path, family):
    want = H100 / f"report_{family}"
    rep = json.loads((want / "heldout.json").read_text())
    assert rep["environment"] and all(e["gpu"] == "NVIDIA H100 80GB HBM3" for e in rep["environment"])
    assert rep["config"]["structural"] and not rep["config"]["admission"]
    assert len(rep["instances"]) == FAMILIES[family] and not rep["missing"]
    for inst in rep["instances"]:
        measured = {c for c, row in inst["conditions"].items() if row["status"] != "NOT_RUN"}
        assert measured == CONDITIONS, (inst["instance"], measured)
    db = tmp_path / "lib.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = klineage_cli(["heldout", "--config", str(PIPELINE), "--db", str(db), "--replay", "--families", family,
                      "--out", str(tmp_path / "out"), "--quiet"], elsewhere)
    assert r.returncode == 0, r.stderr[-3000:]
    for name in ("heldout.txt", "heldout.json"):
        assert (tmp_path / "out" / name).read_bytes() == (want / name).read_bytes(), name
    assert json.loads((tmp_path / "out" / "replay_check.json").read_text())["same"]


def test_every_call_ran_on_the_h100_with_one_library_and_one_code_in_nine_minutes():
    env = json.loads((H100 / "environment.json").read_text())
    assert env["nvidia_smi"].startswith("NVIDIA H100 80GB HBM3")
    libs = sorted(H100.glob("*.library.json.gz"))
    assert [p.name for p in libs] == ["heldout_h100_call1.library.json.gz"]
    lib = json.loads(gzip.decompress(libs[0].read_bytes()))["hash"]
    calls = sorted(H100.glob("heldout_h100_call*.json"))
    assert len(calls) >= 2
    codes = set()
    for path in calls:
        call = json.loads(path.read_text())
        assert call["environment"]["nvidia_smi"].startswith("NVIDIA H100"), path.name
        assert call["library"]["hash"] == lib and call["config"]["admission"] is False, path.name
        assert call["args"]["time_limit"] and float(call["args"]["time_limit"]) < CALL_S, path.name
        assert call["wall_s"] < CALL_S and call["failure"] is None, path.name
        codes.add(call["code"])
    assert len(codes) == 1  # no call took rows another code decided


def _section() -> str:
    """docs/heldout.md's paragraphs on this record, as written (line breaks kept)."""
    doc = (ROOT / "docs" / "heldout.md").read_text()
    return doc[doc.index("**The check with every control (H100).**"):doc.index("**The first structural run")]


def _readme() -> str:
    return " ".join((ROOT / "README.md").read_text().split())


def _readme_states_the_ratio(family: str) -> bool:
    """The README quotes report_FAMILY's skills / control-structural ratio and interval as they are."""
    txt = (H100 / f"report_{family}" / "heldout.txt").read_text().splitlines()
    ratio = next(ln for ln in txt if ln.startswith(f"{family} ") and "skills / control-structural" in ln)
    return "(skills / control-structural " + ratio.split("control-structural ")[1].split(" over")[0] + "," in _readme()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_docs_quote_the_report(family):
    """The lines docs/heldout.md quotes after "From `report_FAMILY/heldout.txt`:" are that report's,
    as it is."""
    txt = {ln.rstrip() for ln in (H100 / f"report_{family}" / "heldout.txt").read_text().splitlines()}
    part = _section()
    block = part.split(f"From `report_{family}/heldout.txt`:", 1)[1].split("From `report_", 1)[0]
    quoted = [ln[4:] for ln in block.splitlines() if ln.startswith("    ")]
    assert len(quoted) >= 4 and all(q in txt for q in quoted), [q for q in quoted if q not in txt]


def test_the_gemm_verdict_in_docs_and_readme_is_the_records():
    part = _section()
    rows = json.loads((H100 / "report_gemm" / "heldout.json").read_text())["instances"]
    faster = [i["instance"] for i in rows
              if i["conditions"]["control-structural"]["speedup"] > i["conditions"]["skills"]["speedup"]]
    assert "faster than skills\non each of the 8 instances" in part and len(faster) == 8
    assert _readme_states_the_ratio("gemm")
    assert "ends faster than skills on all 8 instances" in _readme()


def test_the_attention_verdict_in_docs_and_readme_is_the_records():
    """On attention every searching condition ends on the same speedup on each instance but one
    (attn_causal_b2_s4096's idiom row, which the searches all beat), as the docs say."""
    rows = json.loads((H100 / "report_attention" / "heldout.json").read_text())["instances"]
    searching = CONDITIONS - {"idiom"}
    same = [i["instance"] for i in rows if len({i["conditions"][c]["speedup"] for c in searching}) == 1]
    assert len(same) == 6
    part = " ".join(_section().split())
    assert "every searching condition ends on the same kernel's speedup on each of the 6 instances" in part
    assert "on attention all four searching conditions end level" in _readme()


def test_the_reduction_verdict_in_docs_and_readme_is_the_records():
    """On the reductions skills ends on the idiom kernel's own row on every instance, its structural
    arm from the naive kernel having left the idiom arm at most one candidate; no control ends below
    it, and the ratio and the overall verdict the README states are the reports'."""
    rep = json.loads((H100 / "report_reduction" / "heldout.json").read_text())
    rows = rep["instances"]
    assert len(rows) == 8
    for i in rows:
        c = i["conditions"]
        assert c["skills"]["speedup"] == c["idiom"]["speedup"], i["instance"]
        assert c["skills"]["kernel_hash"] == c["idiom"]["kernel_hash"], i["instance"]
        assert all(c[k]["speedup"] >= c["skills"]["speedup"] for k in CONDITIONS), i["instance"]
        structural, idiom = c["skills"]["arms"]
        assert (structural["start"], idiom["start"]) == ("naive", "idiom") and idiom["evaluated"] <= 1
    foreign = [[a["evaluated"] for a in i["conditions"]["control-foreign"]["arms"]] for i in rows]
    assert foreign == [[5, 7]] * 8
    random_idiom = max(i["conditions"]["control-random"]["arms"][-1]["evaluated"] for i in rows)
    structural = [i["conditions"]["control-structural"]["arms"] for i in rows]
    assert all(arms[-1]["start"] == "idiom" and arms[-1]["evaluated"] == 0 for arms in structural)
    on_idiom = sum(arms[-1].get("chosen", False) for arms in structural)
    above = {k: sum(i["conditions"][k]["speedup"] > i["conditions"]["skills"]["speedup"] for i in rows)
             for k in ("control-random", "control-structural")}
    part = " ".join(_section().split())
    assert "skills ends on the idiom kernel as it stands on each of the 8 instances" in part
    assert f"(on {above['control-random']} and {above['control-structural']} instances)" in part
    assert f"control-random's idiom arm gets up to {random_idiom} candidates" in part
    assert f"gets none, and it ends on the idiom kernel on {on_idiom} instances" in part
    assert _readme_states_the_ratio("reduction")
    readme = _readme()
    assert "ends on the idiom kernel on all 8 instances, below every control in geomean" in readme
    whole = (H100 / "report" / "heldout.txt").read_text().splitlines()
    overall = {ln.split("skills / ")[1].split()[0]: ln.split(": ")[-1] for ln in whole
               if ln.startswith("overall ") and "skills / " in ln}
    assert overall["control-random"] == overall["control-foreign"] == "faster beyond the timing noise"
    assert overall["control-structural"] == "slower beyond the timing noise"
    assert ("skills is faster than control-random and control-foreign and slower than control-structural, "
            "each beyond the timing noise") in readme
