"""Synthetic skill cards for tests: a complete SkillCard (it validates) with the facts a test names
and neutral values elsewhere. Nothing here is a measurement; tests that need measured cards copy the
shipped library."""
from __future__ import annotations

import hashlib

from klineage.records import SkillCard, to_plain

PLATFORM = "NVIDIA H200 (sm_90)"


def case(workload: str, shape: dict, speedup: float, platform: str = PLATFORM) -> dict:
    """One measured case of a synthetic transition (its latencies consistent with `speedup`)."""
    return {"workload": workload, "shape": shape, "shape_text": ", ".join(f"{k}={v}" for k, v in shape.items()),
            "platform": platform, "speedup": speedup, "trial_speedups": [speedup] * 3, "spread": 0.0, "workers": 1,
            "worker_speedups": [speedup], "label": "faster" if speedup > 1.0 else "neutral",
            "richer_us": 100.0, "simpler_us": 100.0 * speedup, "transition_id": f"t-{workload}"}


def skill_card(name: str, mechanism: str, cases: list[dict], *, provides: list[list[str]] = (),
               requires: list[list[str]] = (), conflicts: list[list[str]] = (), example: list[dict] = (),
               preconditions: dict | None = None, admitted: bool = True, platform: str = PLATFORM,
               intent: str | None = None, measured: list[dict] = ()) -> dict:
    """A complete card (plain form) for a skill called `name` of `mechanism`, measured in `cases`;
    `measured`: its carrier's measured configurations ({workload, kernel, values})."""
    sid = hashlib.sha256(name.encode()).hexdigest()[:16]
    speeds = [c["speedup"] for c in cases] or [1.0]
    card = {
        "skill_id": sid, "name": name, "mechanism": mechanism,
        "anchor": {"signature": f"{mechanism} (test)", "query": "(test fixture)", "paths": []},
        "carrier": {"before": "", "after": "", "forward_rewrite": f"klineage.mechanisms.{mechanism}: reoptimize",
                    "example_configuration": list(example), "measured_configuration": list(measured),
                    "diff": ""},
        "preconditions": preconditions or {},
        "effects": {"median_speedup": sorted(speeds)[len(speeds) // 2], "spread": 0.0,
                    "case_range": [min(speeds), max(speeds)], "per_case": list(cases)},
        "evidence": [], "evaluations": [], "risks": [], "risks_empty_reason": "test fixture: nothing probed",
        "probing": {"probed": False, "tried": [], "violating": [], "summary": "not probed"},
        "scope": {"cases": [c["workload"] for c in cases], "languages": ["cuda"], "platforms": [platform],
                  "prior_mechanisms": [], "measured_platforms": [platform], "compile_checked": {}},
        "provides": [list(p) for p in provides], "requires": [list(r) for r in requires],
        "conflicts": [list(c) for c in conflicts], "verification": [], "source_lineages": [],
        "intent": intent or f"test skill {name}",
        "admission": {"status": "admitted" if admitted else "pending", "reason": "test", "trials": []},
    }
    return to_plain(SkillCard.model_validate(card))
