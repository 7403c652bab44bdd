"""The audit's negative paths, on real detector output of the row_sum expert and its rewrites: a
rules step that removes nothing, the wrong feature, two features, or removes the right one and adds
another is refused (and says what it saw); a re-derivation missing a feature or carrying an extra one
is refused. Through the walk, such candidates are rejections of their own kind and never reach the
gate (a scripted gate: no figure here is a measurement)."""
from __future__ import annotations

from pathlib import Path

import pytest

from klineage.mechanisms.audit import audit_rederived, audit_rules
from klineage.lineage.proposal import Proposal
from klineage.lineage.proposers import RulesProposer
from klineage.lineage.walk import Limits, Walker
from klineage.mechanisms import detect_all
from klineage.mechanisms.base import Feature
from klineage.workload import load_workload
from tests.lineage.test_walk import ScriptedGate

ROOT = Path(__file__).resolve().parents[2]
ROW_SUM = ROOT / "expert_kernels" / "row_sum"
EXPERT = (ROW_SUM / "expert.cu").read_text()


@pytest.fixture(scope="module")
def steps() -> list[Proposal]:
    """The rules proposer's first candidates on the expert whose audit passes: one feature gone each."""
    feats = detect_all(EXPERT)
    out = [p for p in RulesProposer().propose(EXPERT, feats, set()) if isinstance(p, Proposal)]
    good = [p for p in out if audit_rules(feats, detect_all(p.source), p.mechanism, p.locus)["ok"]]
    assert len({p.mechanism for p in good}) >= 2
    return good


def _two_apart(steps) -> tuple[Proposal, Proposal]:
    a = steps[0]
    return a, next(p for p in steps if p.mechanism != a.mechanism)


def _after_both(a: Proposal, b: Proposal) -> str:
    """The expert with a's removal and then b's (b's rewrite found again on a's result)."""
    feats = detect_all(a.source)
    again = next(p for p in RulesProposer().propose(a.source, feats, set())
                 if isinstance(p, Proposal) and (p.mechanism, p.locus) == (b.mechanism, b.locus))
    return again.source


def test_a_step_that_removes_the_declared_feature_only_passes(steps):
    a = steps[0]
    r = audit_rules(detect_all(EXPERT), detect_all(a.source), a.mechanism, a.locus)
    assert r["ok"] and r["removed"] == [[a.mechanism, a.locus]] and r["added"] == [] and r["reason"] == ""


def test_a_step_that_removes_nothing_is_refused(steps):
    a = steps[0]
    feats = detect_all(EXPERT)
    r = audit_rules(feats, feats, a.mechanism, a.locus)
    assert not r["ok"] and r["removed"] == [] and "removed nothing" in r["reason"]
    assert f"{a.mechanism} at {a.locus}" in r["reason"]


def test_a_step_that_removes_another_feature_than_declared_is_refused(steps):
    a, b = _two_apart(steps)
    r = audit_rules(detect_all(EXPERT), detect_all(b.source), a.mechanism, a.locus)
    assert not r["ok"] and r["removed"] == [[b.mechanism, b.locus]] and "expected exactly" in r["reason"]


def test_a_step_that_removes_two_features_is_refused(steps):
    a, b = _two_apart(steps)
    r = audit_rules(detect_all(EXPERT), detect_all(_after_both(a, b)), a.mechanism, a.locus)
    assert not r["ok"] and sorted(map(tuple, r["removed"])) == sorted([(a.mechanism, a.locus), (b.mechanism, b.locus)])
    assert "expected exactly" in r["reason"]


def test_a_step_that_also_adds_a_feature_is_refused(steps):
    a = steps[0]
    before, after = detect_all(EXPERT), detect_all(a.source)
    extra = Feature("fast_math", "row_sum_warp_kernel:__expf", (1, 1))  # a feature the step would have added
    r = audit_rules(before, after + [extra], a.mechanism, a.locus)
    assert not r["ok"] and r["added"] == [["fast_math", "row_sum_warp_kernel:__expf"]] and "added" in r["reason"]
    assert r["removed"] == [[a.mechanism, a.locus]]  # the right removal does not excuse the addition


def test_a_rederivation_with_exactly_the_original_features_passes(steps):
    a = steps[0]
    r = audit_rederived(detect_all(EXPERT), detect_all(RulesProposer().rederive(a)))
    assert r == {"ok": True, "missing": [], "extra": [], "reason": ""}


def test_a_rederivation_missing_a_feature_or_carrying_an_extra_one_is_refused(steps):
    a = steps[0]
    orig = detect_all(EXPERT)
    r = audit_rederived(orig, detect_all(a.source))  # the step's result, not re-derived at all
    assert not r["ok"] and r["missing"] == [[a.mechanism, a.locus]] and r["extra"] == [] and r["reason"]
    extra = Feature("fast_math", "row_sum_warp_kernel:__expf", (1, 1))
    r = audit_rederived(orig, orig + [extra])
    assert not r["ok"] and r["missing"] == [] and r["extra"] == [["fast_math", "row_sum_warp_kernel:__expf"]]


class _Fixed:
    """A proposer that offers one prepared candidate, and re-derives it as told."""
    name = "fixed"

    def __init__(self, proposal: Proposal, rederived: str | None):
        self.proposal, self.rederived = proposal, rederived

    def propose(self, source, features, tried):
        if (self.proposal.mechanism, self.proposal.locus) not in tried:
            yield self.proposal

    def rederive(self, proposal):
        return self.rederived


def _walk_one(proposer) -> tuple[dict, ScriptedGate]:
    gate = ScriptedGate()
    lin = Walker(gate, load_workload(ROW_SUM), [proposer], Limits(max_rejections=1)).run(EXPERT, origin="expert.cu")
    return lin, gate


def test_the_walk_rejects_a_two_feature_step_before_the_gate(steps):
    a, b = _two_apart(steps)
    two = Proposal("fixed", a.mechanism, a.locus, _after_both(a, b), config=a.config)
    lin, gate = _walk_one(_Fixed(two, EXPERT))
    assert lin["transitions"] == [] and [r["kind"] for r in lin["rejections"]] == ["audit"]
    assert gate.calls == 1  # the start kernel only: the refused candidate was never evaluated


def test_the_walk_rejects_a_rederivation_that_does_not_restore_the_features(steps):
    a = steps[0]
    lin, gate = _walk_one(_Fixed(Proposal("fixed", a.mechanism, a.locus, a.source, config=a.config), a.source))
    assert lin["transitions"] == [] and [r["kind"] for r in lin["rejections"]] == ["rederive_audit"]
    assert gate.calls == 2  # the start and the simpler kernel; the re-derived one is never evaluated
