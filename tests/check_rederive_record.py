"""What the forward re-derivation record must show beyond tests/test_rederive_record.py: the fourth walk
(`worse`: the transpose padding restored at a stride that keeps the bank conflicts) reaches the step it
re-derives its own way, measures that kernel, and the threshold rejects it.

Not collected by the suite (its name does not start with test_): in the H100 record in
benchmarks/results/ both transpose walks stop at the launch_bounds step, whose other route
(`min_blocks = 2`) measured 0.93x of the rung and was rejected, so neither reaches the padding step and
the `worse` walk measures nothing of its own. Run it by hand (`pytest tests/check_rederive_record.py`).
"""
from __future__ import annotations

from tests.test_rederive_record import record, record_path  # noqa: F401, F811 (fixtures)


def test_the_worse_walk_measures_its_own_rederivation_and_rejects_it(record):
    w = record["walks"]["transpose_worse"]
    assert "live" in w["sources"], "the worse walk measured nothing of its own"
    slow = [r for r in w["rejections"] if r["kind"] == "rederive_slow"]
    assert any(r.get("route") == "worse" for r in slow), [(r["mechanism"], r.get("route")) for r in slow]
