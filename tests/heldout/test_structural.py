"""The held-out conditions with structural rewrites (`--structural on`), on the fixture instances with
the scripted GPU (tests/heldout/support.py: no figure here is a measurement): where each searching
condition starts, the order of its structural rewrites (the library's rank for skills, a seeded
random order of the same rewriters for control-random, the foreign library's for control-foreign),
that they come before any sweep point, and that each condition keeps to the same budget."""
from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from klineage.apply.engine import structural_order
from klineage.cli import main
from klineage.heldout.sources import random_seed
from klineage.mechanisms.shapes import rowwise

from tests.heldout.support import FIXTURES, make_library, script_gpu

pytestmark = pytest.mark.nvcc

BUDGET, SEED = 8, 7


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("structural")
    lib = make_library(tmp / "lib.duckdb", structural=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KLINEAGE_HOME", str(tmp / "home"))
        mp.delenv("ANTHROPIC_API_KEY", raising=False)
        db, out = tmp / "run.duckdb", tmp / "out"
        shutil.copy(lib, db)
        script_gpu(mp)
        r = CliRunner().invoke(main, ["heldout", str(FIXTURES), "--db", str(db), "--out", str(out), "--budget",
                                      str(BUDGET), "--seed", str(SEED), "--structural", "on", "--instances", "rms_tiny",
                                      "--conditions", "idiom,skills,control-random,control-foreign", "--quiet"])
        assert r.exit_code == 0, r.output
    report = json.loads((out / "heldout.json").read_text())
    (inst,) = report["instances"]
    return {"rows": inst["conditions"], "report": report}


def _arm(row):
    (arm,) = row["arms"]
    return arm


def test_each_searching_condition_is_one_arm_from_the_naive_start(run):
    for cond in ("skills", "control-random", "control-foreign"):
        row = run["rows"][cond]
        assert row["status"] == "PASSED", row.get("reason")
        arm = _arm(row)
        assert arm["start"] == "naive" and arm["materializers"] == ["rules", "sweep"], cond
        assert row["evaluations_used"] == arm["evaluated"] <= BUDGET, cond
    assert run["report"]["config"]["structural"] is True


def _is_structural(step) -> bool:
    from klineage.mechanisms.shapes import knows
    name = step.get("skill") or ""
    return step["backend"] == "rules" and knows(name.split("/")[0])


def test_structural_rewrites_come_before_any_sweep_point(run):
    for cond in ("skills", "control-random", "control-foreign"):
        steps = [s for s in _arm(run["rows"][cond])["steps"] if s.get("status") != "NO_REWRITE"]
        kinds = ["structural" if _is_structural(s) else s["backend"] for s in steps]
        if "sweep" in kinds:
            assert "structural" not in kinds[kinds.index("sweep"):], (cond, kinds)


def test_skills_take_the_library_order_and_keep_what_pays(run):
    steps = [s for s in _arm(run["rows"]["skills"])["steps"] if s["backend"] == "rules"]
    gated = [s["skill"] for s in steps if s["status"] != "NO_REWRITE"]
    # retrieval ranks by effect: the block per row first; then the shuffles and the cache on the shared row
    assert gated[0] == "block_per_row/kernel-structure"
    assert {"warp_reduction/warp-reduction", "register_cache/kernel-structure"} <= set(gated)
    kept = _arm(run["rows"]["skills"])["kept"]
    assert kept[0] == "block_per_row/kernel-structure"
    used = {u["skill"] for u in run["rows"]["skills"]["skills_used"]}
    assert "block_per_row/kernel-structure" in used


def test_the_random_control_takes_every_rewriter_in_its_seeded_order(run):
    from klineage.mechanisms.shapes import rewriters
    arm = _arm(run["rows"]["control-random"])
    order = structural_order({"mode": "random", "seed": random_seed(SEED, "rms_tiny")})
    assert sorted(order) == sorted({m for rw in rewriters() for m in rw.mechanisms})
    # on each best kernel the mechanisms a rewriter recognising it adds (the row-wise ones here) are
    # taken from the start of the seeded order, each once: prefixes of it, one after each kept rewrite
    order = [m for m in order if m in rowwise.MECHANISMS]
    segments, cur = [], []
    for s in (s for s in arm["steps"] if s["backend"] == "rules"):
        cur.append(s["skill"])
        if s.get("accepted"):
            segments.append(cur)
            cur = []
    segments.append(cur)
    assert len(segments) > 2
    for seg in segments:
        assert seg == order[:len(seg)], (seg, order)
    assert run["rows"]["control-random"]["library"] is None and run["rows"]["control-random"]["skills_used"] == []
    # then the random sweep, with what the budget leaves
    assert arm["steps"][-1]["backend"] == "sweep" and arm["evaluated"] == BUDGET


def test_the_foreign_control_has_no_row_rewrite_in_its_library(run):
    arm = _arm(run["rows"]["control-foreign"])
    assert not any(s["backend"] == "rules" and s.get("status") != "NO_REWRITE" and "per_row" in (s.get("skill") or "")
                   for s in arm["steps"])
    assert "block_per_row/kernel-structure" not in (run["rows"]["control-foreign"]["library"] or [])
