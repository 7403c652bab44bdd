"""control-structural, the idiom arm of a reduction and the budget curves, on the fixture reduction
(rms_tiny: a naive and an idiom kernel) with the scripted GPU (tests/heldout/support.py: no figure
here is a measurement).

control-structural takes the same rewriters as control-random in its seeded order at their own
parameters, keeps each rewrite that passes, and sweeps every kernel of that chain on its own axes with
the budget the rewrites left, split evenly; it reads no card. With `idiom_arm`, every structural
condition keeps the reduction's idiom kernel as an arm after its naive-start arms."""
from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from klineage.apply.engine import spends_budget, structural_order
from klineage.apply.materialize import tunables
from klineage.cli import main
from klineage.heldout.run import budget_curve
from klineage.heldout.sources import random_seed
from klineage.mechanisms.shapes import rowwise
from klineage.store import open_store

from tests.heldout.support import FIXTURES, make_library, script_gpu

pytestmark = pytest.mark.nvcc

BUDGET, SEED = 8, 7
CONDS = "idiom,skills,control-random,control-structural"


def _pipeline(tmp, conditions: str) -> object:
    p = tmp / "h.toml"
    conds = ", ".join(f'"{c}"' for c in conditions.split(","))
    p.write_text(f'kind = "heldout"\n[heldout]\nconditions = [{conds}]\nbudget = {BUDGET}\nseed = {SEED}\n'
                 'structural = true\nidiom_arm = true\nadmission = false\n')
    return p


def _invoke(tmp, lib, conditions: str, name: str):
    db, out = tmp / f"{name}.duckdb", tmp / f"{name}_out"
    shutil.copy(lib, db)
    r = CliRunner().invoke(main, ["heldout", str(FIXTURES), "--db", str(db), "--out", str(out), "--config",
                                  str(_pipeline(tmp, conditions)), "--instances", "rms_tiny", "--quiet"])
    assert r.exit_code == 0, r.output
    return db, out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("structural_control")
    lib = make_library(tmp / "lib.duckdb", structural=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KLINEAGE_HOME", str(tmp / "home"))
        mp.delenv("ANTHROPIC_API_KEY", raising=False)
        script_gpu(mp)
        db, out = _invoke(tmp, lib, CONDS, "run")
    report = json.loads((out / "heldout.json").read_text())
    (inst,) = report["instances"]
    return {"rows": inst["conditions"], "report": report, "db": db, "out": out, "lib": lib, "tmp": tmp}


def _start_source(store, arm: dict) -> str:
    return store.get_kernel(store.get_apply_run(arm["apply_run"])["start_hash"])["source"]


def test_control_structural_keeps_each_passing_rewrite_and_sweeps_it_on_its_own_axes(run):
    row = run["rows"]["control-structural"]
    assert row["status"] == "PASSED", row.get("reason")
    arms = row["arms"]
    rewrites, sweeps, idiom = arms[0], arms[1:-1], arms[-1]
    assert (rewrites["arm"], rewrites["start"], rewrites["materializers"]) == ("rewrites", "naive", ["rules"])
    gated = [s for s in rewrites["steps"] if s["status"] != "NO_REWRITE"]
    passed = [s for s in gated if s["status"] == "PASSED"]
    assert passed and all(s["accepted"] for s in passed)  # kept because they passed, faster or not
    # the same rewriters in control-random's seeded order: prefixes of it, one after each kept rewrite
    order = [m for m in structural_order({"mode": "random", "seed": random_seed(SEED, "rms_tiny")})
             if m in rowwise.MECHANISMS]
    seg = []
    for s in rewrites["steps"]:
        seg.append(s["skill"])
        if s.get("accepted"):
            assert seg == order[:len(seg)], (seg, order)
            seg = []
    # one sweep arm per kernel of the chain (the start and each kept rewrite), the budget left split evenly
    assert len(sweeps) == 1 + len(passed)
    labels = ["naive"]
    for s in passed:
        labels.append(f"{labels[-1]}+{s['skill']}")
    assert sorted(a["start"] for a in sweeps) == sorted(labels)
    left = BUDGET - rewrites["evaluated"]
    shares = [a["budget"] for a in sweeps]
    assert sum(shares) == left and max(shares) - min(shares) <= 1
    store = open_store(run["db"])
    try:
        for a in sweeps:
            assert a["materializers"] == ["sweep"] and a["evaluated"] <= a["budget"]
            own = set(tunables(_start_source(store, a)))
            for st in a["steps"]:
                assert st["backend"] == "sweep" and not st.get("steered_by")
                assert set(st["config"]) <= own, (a["start"], st["config"], own)  # its own axes
        # the arms that got a share of more than the others are the fastest by the search's measurement
        scores = {a["start"]: a["best_score"] for a in sweeps}
        assert scores and all(v is not None for v in scores.values())
    finally:
        store.close()
    assert idiom["arm"] == "idiom" and idiom["start"] == "idiom"
    assert row["evaluations_used"] == sum(a["evaluated"] for a in arms) <= BUDGET
    assert row["library"] is None and row["skills_used"] == []


def test_every_structural_condition_keeps_the_idiom_kernel_as_an_arm(run):
    for cond in ("skills", "control-random", "control-structural"):
        row = run["rows"][cond]
        assert row["status"] == "PASSED", (cond, row.get("reason"))
        idiom = row["arms"][-1]
        assert (idiom["arm"], idiom["start"]) == ("idiom", "idiom"), cond
        assert idiom["best_score"] is not None  # measured even when the arms before spent the budget
        chosen = next(a for a in row["arms"] if a.get("chosen"))
        assert chosen["best_score"] >= idiom["best_score"], cond
        assert row["evaluations_used"] <= BUDGET
    # the random control's idiom arm draws at random, control-structural's sweeps unsteered, skills' is steered
    assert run["rows"]["control-random"]["arms"][-1]["apply_run"] != run["rows"]["skills"]["arms"][-1]["apply_run"]


def test_budget_curves_are_read_from_the_recorded_trajectory(run):
    store = open_store(run["db"])
    try:
        for cond in ("skills", "control-random", "control-structural"):
            row = run["rows"][cond]
            curve = row["budget_curve"]
            assert len(curve) == BUDGET + 1
            assert all(a is None or b >= a for a, b in zip(curve, curve[1:]))  # a best so far
            steps = [st for a in row["arms"] if a.get("apply_run") for st in store.apply_steps(a["apply_run"])]

            def score(key):
                sp = [t["speedup_vs_vendor"] for t in store.get_evaluation(key)["result"]["timing"]]
                return (sp[0] if len(sp) == 1 else None)
            assert budget_curve(steps, BUDGET, score) == pytest.approx(curve), cond
            # the last entry is the best round-1 measurement of any kernel that passed
            best = max(score(st["eval_key"]) for st in steps if st["kind"] in ("start", "candidate")
                       and st["status"] == "PASSED")
            assert curve[-1] == pytest.approx(best), cond
    finally:
        store.close()
    assert "budget_curve" not in run["rows"]["idiom"]
    summ = run["report"]["summary"]["budget_curves"]
    assert set(summ) == {"reduction", "overall"}
    assert summ["reduction"]["skills"] == pytest.approx(run["rows"]["skills"]["budget_curve"])
    text = (run["out"] / "heldout.txt").read_text()
    assert "== budget curves" in text and "control-structural" in text


def test_budget_curve_counts_candidates_not_refused_points_and_starts_where_their_arm_began():
    steps = [{"kind": "start", "status": "PASSED", "eval_key": "s"},
             {"kind": "candidate", "backend": "rules", "status": "INCORRECT", "eval_key": "a"},
             {"kind": "candidate", "backend": "sweep", "status": "COMPILE_ERROR", "error_kind": "nvcc_error",
              "eval_key": "r"},
             {"kind": "materialize", "status": "NO_REWRITE"},
             {"kind": "candidate", "backend": "sweep", "status": "PASSED", "eval_key": "b"},
             {"kind": "start", "status": "PASSED", "eval_key": "idiom"}]
    assert not spends_budget(steps[2])
    scores = {"s": 0.2, "b": 0.5, "idiom": 0.9}
    assert budget_curve(steps, 3, scores.get) == [0.2, 0.2, 0.9, 0.9]
    assert budget_curve(steps[1:2], 2, scores.get) == [None, None, None]


class _CardRead(AssertionError):
    pass


class _Guarded(dict):
    """A library row whose card cannot be read while `armed`."""
    armed = False

    def __getitem__(self, key):
        if _Guarded.armed and key in ("card", "card_md"):
            raise _CardRead(f"a card was read: {dict.get(self, 'name')}")
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        return self[key] if key in self else default


def test_control_structural_reads_no_card(run, monkeypatch):
    import klineage.heldout.run as run_mod
    from klineage.store.db import Store
    skills = Store.skills
    monkeypatch.setattr(Store, "skills", lambda self: [_Guarded(s) for s in skills(self)])
    search = run_mod._InstanceRun.search
    searched = []

    def guarded(self, cond):
        _Guarded.armed = cond == "control-structural"
        try:
            searched.append(cond)
            return search(self, cond)
        finally:
            _Guarded.armed = False
    monkeypatch.setattr(run_mod._InstanceRun, "search", guarded)
    monkeypatch.setenv("KLINEAGE_HOME", str(run["tmp"] / "home"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    script_gpu(monkeypatch)
    tmp = run["tmp"]
    db, out = _invoke(tmp, run["lib"], "idiom,control-structural", "guarded")
    row = json.loads((out / "heldout.json").read_text())["instances"][0]["conditions"]["control-structural"]
    assert searched == ["control-structural"] and row["status"] == "PASSED"
    # the guard trips where a card is read: the skills condition under it does not get through
    def armed_for_skills(self, cond):
        _Guarded.armed = cond == "skills"
        try:
            return search(self, cond)
        finally:
            _Guarded.armed = False
    monkeypatch.setattr(run_mod._InstanceRun, "search", armed_for_skills)
    db = tmp / "guarded_skills.duckdb"
    shutil.copy(run["lib"], db)
    r = CliRunner().invoke(main, ["heldout", str(FIXTURES), "--db", str(db), "--out", str(tmp / "gs_out"), "--config",
                                  str(_pipeline(tmp, "idiom,skills")), "--instances", "rms_tiny", "--quiet"])
    assert r.exit_code != 0 and "a card was read" in r.output
