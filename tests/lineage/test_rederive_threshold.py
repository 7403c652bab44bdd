"""The forward re-derivation threshold (klineage.lineage.walk.rederive_trials): per shape, every timing
trial of the re-derived kernel must reach `min_ratio` of the richer kernel's speed. Fast: the mutation
run of the threshold runs these on every mutant (benchmarks/mutation.py)."""
import pytest

from klineage.gate.gate import GateResult, Status
from klineage.lineage.walk import rederive_trials


def result(*shapes: tuple[dict, list[float]]) -> GateResult:
    timing = [{"shape": s, "latency_us": sorted(tr)[len(tr) // 2], "trial_medians_us": tr} for s, tr in shapes]
    return GateResult(Status.PASSED, "k", "w", "e", "live", {}, timing=timing)


A, B = {"n": 1}, {"n": 2}


def test_every_trial_must_reach_the_threshold_not_only_the_best():
    richer = result((A, [100.0, 100.0, 100.0]))
    one_slow = result((A, [99.0, 103.0, 100.0]))  # ratios 1.0101, 0.9709, 1.0: one trial below 0.99
    (t,) = rederive_trials(richer, one_slow, 0.99)
    assert t["speed_ratios"] == pytest.approx([100 / 99, 100 / 103, 1.0]) and not t["ok"]
    (t,) = rederive_trials(richer, result((A, [99.0, 100.5, 101.0])), 0.99)
    assert t["ok"] and t["shape"] == A


def test_the_bound_is_inclusive_and_the_ratio_is_richer_over_rederived():
    (t,) = rederive_trials(result((A, [99.0, 99.0])), result((A, [100.0, 100.0])), 0.99)
    assert t["speed_ratios"] == [0.99, 0.99] and t["ok"]  # exactly at the threshold
    (t,) = rederive_trials(result((A, [99.0])), result((A, [100.0 + 1e-9])), 0.99)
    assert not t["ok"]
    (t,) = rederive_trials(result((A, [50.0])), result((A, [100.0])), 0.99)
    assert t["speed_ratios"] == [0.5] and not t["ok"]  # the re-derived kernel twice as slow
    (t,) = rederive_trials(result((A, [100.0])), result((A, [50.0])), 0.99)
    assert t["speed_ratios"] == [2.0] and t["ok"]
    (t,) = rederive_trials(result((A, [100.0])), result((A, [100.0])), 1.5)
    assert not t["ok"]  # the threshold is the one given


def test_each_shape_is_judged_on_its_own_trials():
    richer = result((A, [100.0, 100.0]), (B, [10.0, 10.0]))
    red = result((A, [100.0, 100.0]), (B, [10.0, 20.0]))
    got = rederive_trials(richer, red, 0.99)
    assert [t["shape"] for t in got] == [A, B] and [t["ok"] for t in got] == [True, False]
    assert got[1]["speed_ratios"] == [1.0, 0.5]
