"""One view of a kernel: every mechanism `klineage features` reports in a ladder's rung is counted by the
walk, in the order of the rungs and in the audit of a step from that rung, over every style-gallery
ladder and every expert-corpus ladder."""
from pathlib import Path

import pytest

from klineage.lineage.proposers import make_proposer
from klineage.mechanisms.audit import seen
from klineage.mechanisms.evidence import features_report

ROOT = Path(__file__).resolve().parents[1]
LADDERS = sorted(p.parent for d in ("style_gallery/ladders", "expert_kernels")
                 for p in (ROOT / d).glob("*/versions") if p.is_dir())


def test_there_are_ladders_of_both_kinds():
    assert {p.parent.name for p in LADDERS} == {"ladders", "expert_kernels"} and len(LADDERS) >= 8


@pytest.mark.nvcc
@pytest.mark.parametrize("ladder", LADDERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_mechanism_features_reports_in_a_rung_is_counted_by_the_walk(ladder):
    prop = make_proposer("versions", ladder)
    for i, v in enumerate(prop.ladder):
        reported = {f["mechanism"] for f in features_report(v.source)["features"]}
        # the order of the rungs holds it (with the structural names the ladder declares)
        assert reported <= prop.order.kinds[i] and prop.order.kinds[i] - reported <= prop.held[i], v.label
        # the audit of a step from this rung reads the same evidence
        audited = {f.feature.mechanism for f in seen(prop.features[i])[0]}
        assert audited == reported, (v.label, sorted(reported ^ audited))
