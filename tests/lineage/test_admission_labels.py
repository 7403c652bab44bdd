"""Admission's effect labels (klineage.lineage.admit): each benchmark case is faster when every trial
ratio base/new is beyond the noise above 1, slower when every one is beyond it below 1, neutral
otherwise; the noise is the larger of 1% and the two kernels' spreads on that case. Fast: the mutation
run of the labels runs these on every mutant (benchmarks/mutation.py)."""
import pytest

from klineage.gate.gate import GateResult, Status
from klineage.lineage import admit

A, B = {"rows": 4, "cols": 8}, {"rows": 2, "cols": 16}


def result(*cases) -> GateResult:
    """cases: (shape, trial medians in us, spread)."""
    timing = [{"shape": dict(s), "latency_us": sorted(tr)[len(tr) // 2], "trial_medians_us": list(tr), "spread": sp}
              for s, tr, sp in cases]
    return GateResult(Status.PASSED, "k", "w", "e", "live", {}, timing=timing)


def labels(base, new):
    return [c["label"] for c in admit._trial_ratios(base, new)]


def test_faster_only_when_every_trial_is_beyond_the_noise():
    base = result((A, [100.0, 100.0, 100.0], 0.0))
    assert labels(base, result((A, [90.0, 90.0, 90.0], 0.0))) == ["faster"]
    # one trial within the noise: not faster, whatever the others
    assert labels(base, result((A, [90.0, 99.5, 90.0], 0.0))) == ["neutral"]
    assert labels(base, result((A, [110.0, 110.0, 110.0], 0.0))) == ["slower"]
    assert labels(base, result((A, [110.0, 100.5, 110.0], 0.0))) == ["neutral"]
    assert labels(base, result((A, [90.0, 110.0, 90.0], 0.0))) == ["neutral"]


def test_the_noise_is_the_larger_of_one_percent_and_the_spreads_and_its_bound_is_exclusive():
    base = result((A, [100.0, 100.0], 0.0))
    c = admit._trial_ratios(base, result((A, [100 / 1.0101, 100 / 1.0101], 0.0)))[0]
    assert c["noise"] == admit.MIN_NOISE == 0.01 and c["label"] == "faster" and c["beyond_noise"]
    c = admit._trial_ratios(base, result((A, [100 / 1.0099, 100 / 1.0099], 0.0)))[0]
    assert c["label"] == "neutral" and not c["beyond_noise"]
    # the spread of either kernel widens the noise: 5% here
    for b_sp, n_sp in ((0.05, 0.0), (0.0, 0.05)):
        c = admit._trial_ratios(result((A, [100.0, 100.0], b_sp)), result((A, [96.0, 96.0], n_sp)))[0]
        assert c["noise"] == 0.05 and c["label"] == "neutral"
        c = admit._trial_ratios(result((A, [100.0, 100.0], b_sp)), result((A, [90.0, 90.0], n_sp)))[0]
        assert c["label"] == "faster"
        c = admit._trial_ratios(result((A, [100.0, 100.0], b_sp)), result((A, [104.0, 104.0], n_sp)))[0]
        assert c["label"] == "neutral"
        c = admit._trial_ratios(result((A, [100.0, 100.0], b_sp)), result((A, [110.0, 110.0], n_sp)))[0]
        assert c["label"] == "slower"
    # exactly at 1 - noise and 1 + noise: neutral (strictly beyond is needed)
    assert labels(base, result((A, [100 / 1.01, 100 / 1.01], 0.0))) == ["neutral"]
    assert labels(base, result((A, [100 / 0.99, 100 / 0.99], 0.0))) == ["neutral"]


def test_each_case_has_its_own_noise_and_its_figures():
    base = result((A, [100.0, 100.0], 0.0), (B, [10.0, 10.0], 0.2))
    new = result((B, [9.0, 9.0], 0.0), (A, [80.0, 80.0], 0.0))  # another order: matched by shape
    cases = admit._trial_ratios(base, new)
    by = {admit._key(c["shape"]): c for c in cases}
    a, b = by[admit._key(A)], by[admit._key(B)]
    assert a["label"] == "faster" and a["noise"] == 0.01 and b["label"] == "neutral" and b["noise"] == 0.2
    assert a["base_us"] == 100.0 and a["new_us"] == 80.0 and a["speedup"] == pytest.approx(1.25)
    assert a["trial_speedups"] == [1.25, 1.25]
    assert admit._key({"b": 1, "a": 2}) == admit._key({"a": 2, "b": 1}) == (("a", 2), ("b", 1))


def test_a_trial_shows_its_cases_common_label():
    assert admit.outcome([{"label": "faster"}, {"label": "faster"}]) == "faster"
    assert admit.outcome([{"label": "neutral"}]) == "neutral"
    assert admit.outcome([{"label": "slower"}, {"label": "slower"}]) == "slower"
    assert admit.outcome([{"label": "faster"}, {"label": "neutral"}]) == "mixed"
    assert admit.outcome([]) == "none"


def test_a_timing_without_a_spread_counts_as_no_spread():
    """Records made before the spread was kept: the noise is then 1%."""
    base = result((A, [100.0, 100.0], 0.0))
    new = result((A, [95.0, 95.0], 0.0))
    for t in base.timing + new.timing:
        del t["spread"]
    (c,) = admit._trial_ratios(base, new)
    assert c["noise"] == 0.01 and c["label"] == "faster"
