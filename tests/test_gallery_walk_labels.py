"""The versions walk of the style-gallery ladders scored against their truth (benchmarks/
gallery_walk_labels.py): the recorded figures (benchmarks/results/gallery_walk_labels.json) are what
a fresh replay of the GPU mining record gives here, and they meet issue 39's targets (rungs reached
>= 80%, accepted steps with their true label >= 95%). Both records are named by the card that mined
(benchmarks/results/gallery_walk_labels_<card>.json, mine_gallery_<card>/). The test fails while the
record is missing or does not score every ladder (the GPU has not mined them yet). The scoring itself is checked on a
ladder walked with a scripted gate (a test device, not a record)."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gallery_walk_labels", ROOT / "benchmarks" / "gallery_walk_labels.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_every_gallery_ladder_has_a_truth_for_every_rung():
    from klineage.lineage.proposers import make_proposer
    from klineage.mechanisms import registry
    known = set(registry())
    dirs = bench.ladders()
    assert [d.name for d in dirs] == sorted(p.name for p in bench.GALLERY.iterdir() if (p / "workload.py").is_file())
    for d in dirs:
        prop = make_proposer("versions", d)
        truth = bench.Truth(d, prop.ladder)
        assert truth.held[0] == frozenset() and all(truth.adds[1:]), d.name
        structural = set(__import__("tomllib").loads((d / "versions" / "ladder.toml").read_text()).get("structural", []))
        assert set().union(*truth.adds) <= known | structural, d.name


def test_the_scoring_of_a_walk(monkeypatch):
    """rowsum_blocks walked with every gate call passing: each accepted step is compared with the
    truth of the rungs it spans; a label that is not the truth is counted as such."""
    from klineage.lineage.proposers import make_proposer
    from klineage.lineage.walk import Walker
    from klineage.workload import load_workload
    from tests.lineage.test_walk import ScriptedGate
    d = bench.GALLERY / "rowsum_blocks"
    prop = make_proposer("versions", d)
    truth = bench.Truth(d, prop.ladder)
    lin = Walker(ScriptedGate(), load_workload(d), [prop]).run(prop.top.source)
    got = bench.score_lineage(lin, prop, truth)
    assert got["rungs"] == 6 and got["accepted"] == len(lin["transitions"])
    index = {v.label: i for i, v in enumerate(prop.ladder)}
    segments: dict = {}
    for s in got["steps"]:
        segments.setdefault((s["from"], s["to"]), []).append(s)
    for (a, b), steps in segments.items():
        want = truth.held[index[a]] - truth.held[index[b]] if a and b else None
        named = set().union(*(set(s["label"]) for s in steps))
        for s in steps:
            assert s["true_label"] == (want is not None and set(s["label"]) <= want and named == want), s
    # a wrong label is not the truth
    lin["transitions"][0] = {**lin["transitions"][0], "mechanism": "fast_math", "mechanisms": ["fast_math"]}
    assert not bench.score_lineage(lin, prop, truth)["steps"][0]["true_label"]


HOW = ("mine the gallery on the GPU (benchmarks/mine_gallery_h200.py), commit its records as "
       "benchmarks/results/mine_gallery_<card>/, then run benchmarks/gallery_walk_labels.py --write")


@pytest.mark.nvcc
def test_the_record_is_a_fresh_replay_and_meets_the_targets():
    from record_names import card_of, the_record
    record = the_record(bench.RESULTS, bench.STEM + ".json", HOW)
    recorded = json.loads(record.read_text())
    mined = bench.mining_record()
    assert card_of(record, bench.STEM + ".json") == card_of(mined, bench.MINED), "scored from another card's record"
    assert recorded["totals"]["unscored_ladders"] == [], f"the GPU record lacks evaluations of these ladders: {HOW}"
    fresh = json.loads(json.dumps(bench.run(mined)))
    assert fresh["ladders"] == recorded["ladders"]
    assert fresh["totals"] == recorded["totals"]
    assert bench.failures(recorded) == []
