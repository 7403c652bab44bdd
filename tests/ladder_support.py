"""What every ladder test (tests/test_*_ladder.py) checks the same way: the scripted versions walk
from the expert down to the naive kernel."""
from __future__ import annotations

from pathlib import Path

from klineage.gate.gate import kernel_hash
from klineage.lineage.proposers import make_proposer
from klineage.lineage.walk import Limits, Walker


def assert_versions_walk(workload, workload_dir: Path, ladder: list[tuple[str, str]], expert_adds: str,
                         labels: dict[str, str] | None = None) -> dict:
    """The versions proposer walks expert.cu to naive.cu, one declared mechanism per step, in the
    ladder's order reversed, with no rejection, under a scripted gate that passes everything. A step
    is labelled with what the evidence says it adds: `labels` maps a rung's declared mechanism to that
    label where the two differ (a rung that also adds a form no rule takes off)."""
    from tests.lineage.test_walk import ScriptedGate

    w = Walker(ScriptedGate(), workload, [make_proposer("versions", workload_dir)], Limits())
    lin = w.run((workload_dir / "expert.cu").read_text(), origin=f"expert_kernels/{workload_dir.name}/expert.cu")
    assert lin["termination"] == "complete", lin["rejections"]
    want = [expert_adds] + [mech for _, mech in reversed(ladder)]
    assert [t["mechanism"] for t in lin["transitions"]] == [(labels or {}).get(m, m) for m in want]
    assert lin["states"][-1]["kernel_hash"] == kernel_hash((workload_dir / "naive.cu").read_text())
    assert not lin["rejections"] and lin["remaining"] == []
    return lin
