"""The backward walk and the lift, driven by a scripted gate (a test double that returns gate
results chosen by the test; no figure here is a measurement)."""
import copy
import dataclasses
from pathlib import Path

import pytest

from klineage.errors import ReplayMissingError
from klineage.gate.gate import GateConfig, GateResult, Status, kernel_hash
from klineage.lineage import lift as lift_mod
from klineage.lineage.proposers import ProposerError, RulesProposer, make_proposer
from klineage.lineage.walk import Limits, Walker
from klineage.mechanisms import detect_all
from klineage.store import open_store
from klineage.workload import load_workload

ROW_SUM = Path(__file__).resolve().parents[2] / "expert_kernels" / "row_sum"


class ScriptedGate:
    """Returns PASSED with latency `latency(source)`, or the status `verdict(source)` gives."""

    def __init__(self, store=None, latency=None, verdict=None, missing=None):
        self.config = GateConfig()
        self.compile_log = []
        self.store = store
        self.latency = latency or (lambda src: 100.0 + len(src) % 7)
        self.verdict = verdict or (lambda src: Status.PASSED)
        self.missing = missing or (lambda src: False)
        self.calls = 0

    def with_config(self, config, share_worker=True):
        g = copy.copy(self)
        g.config = config
        return g

    def repeat(self, round_):
        return self.with_config(dataclasses.replace(self.config, round=round_), share_worker=False)

    def close(self):
        pass

    def evaluate(self, source, workload, origin=None, replay=False):
        self.calls += 1
        if self.missing(source):
            raise ReplayMissingError(f"no recorded evaluation of kernel {kernel_hash(source)[:12]}")
        h = kernel_hash(source)
        if self.store is not None:
            self.store.put_kernel(h, source, origin)
        status = self.verdict(source)
        lat = self.latency(source)
        timing = [{"shape": s, "latency_us": lat, "trial_medians_us": [lat, lat, lat]}
                  for s in workload.benchmark_cases] if status is Status.PASSED else []
        return GateResult(status, h, workload.name, "key-" + h[:16], "scripted", {}, timing=timing,
                          env={"gpu": "scripted", "capability": "9.0"},
                          error_kind=None if status is Status.PASSED else "wrong_values",
                          error_message=None if status is Status.PASSED else "scripted failure")


@pytest.fixture(scope="module")
def wl():
    return load_workload(ROW_SUM)


def _walk(wl, gate, proposers=None, limits=Limits(), start=None):
    w = Walker(gate, wl, proposers or [RulesProposer()], limits)
    return w, w.run(start or (ROW_SUM / "expert.cu").read_text(), origin="expert_kernels/row_sum/expert.cu")


def test_rules_walk_removes_one_feature_per_step_and_names_what_is_left(wl):
    _, lin = _walk(wl, ScriptedGate())
    assert lin["termination"] == "no_proposal"
    assert lin["remaining"] == ["thread_block_cluster"]  # structural: no rule removes it
    for t in lin["transitions"]:
        rich = {(f["mechanism"], f["locus"]) for f in t["features_richer"]}
        simple = {(f["mechanism"], f["locus"]) for f in t["features_simpler"]}
        assert rich - simple == {(t["mechanism"], t["locus"])} and simple <= rich
        assert t["rederived_identical"]  # reoptimize restored the richer kernel byte for byte
    mechs = [t["mechanism"] for t in lin["transitions"]]
    assert mechs[0] == "cache_hint" and "restrict" in mechs and "launch_bounds" in mechs
    assert len(lin["states"]) == len(lin["transitions"]) + 1


def test_equal_inputs_give_equal_lineages(wl):
    _, a = _walk(wl, ScriptedGate())
    _, b = _walk(wl, ScriptedGate())
    assert a == b


def test_a_failing_candidate_is_a_rejection_and_the_walk_goes_on(wl):
    expert = (ROW_SUM / "expert.cu").read_text()
    first = RulesProposer()
    cand = next(p for p in first.propose(expert, detect_all(expert), set()) if not isinstance(p, tuple))
    bad = kernel_hash(cand.source)
    _, lin = _walk(wl, ScriptedGate(verdict=lambda s: Status.INCORRECT if kernel_hash(s) == bad else Status.PASSED))
    rej = [r for r in lin["rejections"] if r["kind"] == "incorrect"]
    assert len(rej) == 1 and rej[0]["mechanism"] == cand.mechanism and rej[0]["locus"] == cand.locus
    assert rej[0]["eval_key"].startswith("key-")
    assert (cand.mechanism, cand.locus) not in {(t["mechanism"], t["locus"]) for t in lin["transitions"]}
    assert cand.mechanism in lin["remaining"]
    assert lin["termination"] == "no_proposal"


def test_limits_and_their_termination_reasons(wl):
    _, lin = _walk(wl, ScriptedGate(), limits=Limits(max_steps=2))
    assert lin["termination"] == "step_limit" and len(lin["transitions"]) == 2
    _, lin = _walk(wl, ScriptedGate(verdict=lambda s: Status.INCORRECT if
                                     kernel_hash(s) != kernel_hash((ROW_SUM / "expert.cu").read_text())
                                     else Status.PASSED), limits=Limits(max_rejections=3))
    assert lin["termination"] == "rejection_limit" and len(lin["transitions"]) == 0
    assert len([r for r in lin["rejections"] if r["kind"] == "incorrect"]) == 3
    _, lin = _walk(wl, ScriptedGate(verdict=lambda s: Status.INCORRECT))
    assert lin["termination"] == "start_failed" and lin["start_status"] == "INCORRECT"


def test_forward_rederivation_must_keep_speed_in_every_trial(wl):
    class Slow(RulesProposer):
        def rederive(self, proposal):
            src = super().rederive(proposal)
            return src + "\n// re-derived\n"  # same features, another kernel

    _, lin = _walk(wl, ScriptedGate(latency=lambda s: 150.0 if s.endswith("// re-derived\n") else 100.0),
                   proposers=[Slow()], limits=Limits(max_rejections=4))
    assert lin["transitions"] == []
    assert {r["kind"] for r in lin["rejections"]} == {"rederive_slow"}
    assert lin["rejections"][0]["trials"][0]["speed_ratios"] == pytest.approx([100 / 150] * 3)


def test_replay_gaps_are_listed_not_invented(wl):
    expert = (ROW_SUM / "expert.cu").read_text()
    w, lin = _walk(wl, ScriptedGate(missing=lambda s: s != expert), limits=Limits(max_rejections=5))
    assert lin["transitions"] == [] and lin["termination"] == "rejection_limit"
    assert {r["kind"] for r in lin["rejections"] if r["kind"] != "not_applicable"} == {"replay_missing"}
    assert len(w.missing) == 5 and all(m["workload"] == "row_sum" for m in w.missing)


def test_versions_ladder_walks_to_the_naive_kernel(wl):
    _, lin = _walk(wl, ScriptedGate(), proposers=[make_proposer("versions", ROW_SUM)])
    assert lin["termination"] == "complete", lin["rejections"]
    steps = [t["mechanism"] for t in lin["transitions"]]
    assert steps[0] == "thread_block_cluster" and steps[-1] == "restrict" and len(steps) >= 4
    # the warp-per-row rung also adds a warp-stride loop over rows (a grid-stride form of coarsening the
    # evidence reads and no rule takes off): the step is labelled with both
    assert "coarsening+warp_per_row" in steps and "block_per_row" in steps
    assert lin["states"][-1]["kernel_hash"] == kernel_hash((ROW_SUM / "naive.cu").read_text())


def test_versions_proposer_needs_a_ladder(tmp_path):
    (tmp_path / "workload.py").write_text("")
    with pytest.raises(ProposerError, match="no versions"):
        make_proposer("versions", tmp_path)
    with pytest.raises(ProposerError, match="llm proposer"):
        make_proposer("llm", tmp_path)


def test_lift_gives_full_cards_and_checks_the_contract(wl):
    with open_store() as st:
        gate = ScriptedGate(store=st, latency=lambda s: 100.0 - 0.001 * len(s))
        for props in ([RulesProposer()], [make_proposer("versions", ROW_SUM)]):
            _, lin = _walk(wl, gate, proposers=props)
            st.put_lineage(lin)
        transitions = st.transitions()
        skills = lift_mod.lift(transitions, st.rejections(), lambda h: (st.get_kernel(h) or {}).get("source"))
    names = {s["name"] for s in skills}
    assert {"restrict/pointer-parameters", "cache_hint/global-load", "block_per_row/kernel-structure",
            "thread_block_cluster/cluster-launch-dsmem"} <= names
    for s in skills:
        c = s["card"]
        assert c["intent"] and c["anchor"]["signature"] and c["carrier"]["after"] and c["provides"]
        assert set(c["preconditions"]) == set(lift_mod.CATEGORIES)
        assert c["effects"]["per_case"] and c["scope"]["platforms"] == ["scripted (sm_90)"]
        assert c["risks"] or c["risks_empty_reason"]
        assert c["verification"] and all(v["ok"] for v in c["verification"])
        assert f"# {s['name']}" in s["card_md"]
    restrict = next(s for s in skills if s["name"] == "restrict/pointer-parameters")
    assert len(restrict["card"]["evidence"]) == 4  # three rules steps and one ladder step
    bad = copy.deepcopy(restrict["card"])
    bad["requires"] = [["warpgroup MMA", "wgmma"]]
    evidence = [t for t in transitions if t["transition_id"] in restrict["card"]["evidence"]]
    lift_mod.check_contract(restrict["card"], evidence)
    with pytest.raises(ValueError, match="requires"):
        lift_mod.check_contract(bad, evidence)
    bad = copy.deepcopy(restrict["card"])
    bad["provides"] = [["loop", "unroll"]]
    with pytest.raises(ValueError, match="provides"):
        lift_mod.check_contract(bad, evidence)


def test_versions_audit_takes_a_pipeline_with_its_stage_ring_as_one_step():
    from klineage.mechanisms.audit import audit_version
    from klineage.mechanisms.base import Feature

    def feats(*kinds):
        return [Feature(k, f"f:{k}", (1, 1)) for k in kinds]

    known = {"async_copy", "multistage_buffer", "tensor_core_mma", "wgmma"}
    simple = feats("tensor_core_mma")
    richer = feats("tensor_core_mma", "async_copy", "multistage_buffer")
    assert audit_version(richer, simple, "async_copy", known)["ok"]
    # a companion is not a licence for anything else: wgmma is no part of a copy pipeline
    r = audit_version(feats("tensor_core_mma", "async_copy", "wgmma"), simple, "async_copy", known)
    assert not r["ok"] and "wgmma" in r["reason"]
    # nor does it make the companion alone count as the declared mechanism
    assert not audit_version(feats("tensor_core_mma", "multistage_buffer"), simple, "async_copy", known)["ok"]


def test_compare_timing_matches_a_case_whatever_the_order_of_its_keys():
    from klineage.gate.gate import GateResult, Status
    from klineage.gate.compare import compare_timing

    def res(shape, us):
        return GateResult(Status.PASSED, "k", "w", "e", "s", {},
                          timing=[{"shape": shape, "latency_us": us, "trial_medians_us": [us, us, us]}])
    live = res({"rows": 16384, "cols": 8192}, 100.0)   # the workload's key order
    stored = res({"cols": 8192, "rows": 16384}, 200.0)  # a record read back from the store: keys sorted
    cases = compare_timing(live, stored)
    assert len(cases) == 1 and cases[0]["speedup"] == 2.0
    # two different cases with the same values in another order are not confused
    assert compare_timing(live, res({"rows": 8192, "cols": 16384}, 200.0)) == []
