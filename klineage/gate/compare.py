"""How two gate results of one workload compare, case by case: the timing comparison the walk,
admission and apply read their accept rules from."""
from __future__ import annotations

import statistics

from klineage.gate.gate import GateResult


def _shape_key(shape: dict) -> str:
    """Order-free: a stored record's shape comes back with its keys sorted (JSON through the store),
    a live result's in the workload's order, and both must name the same case."""
    return ",".join(f"{k}={shape[k]}" for k in sorted(shape))


def compare_timing(richer: GateResult, simpler: GateResult) -> list[dict]:
    """Per benchmark shape: latencies, forward speedup (simpler / richer), per-trial ratios, spread."""
    out = []
    by_shape = {_shape_key(t["shape"]): t for t in simpler.timing}
    for t in richer.timing:
        s = by_shape.get(_shape_key(t["shape"]))
        if s is None:
            continue
        ratios = [a / b for a, b in zip(s["trial_medians_us"], t["trial_medians_us"])]
        med = statistics.median(ratios)
        out.append({"shape": t["shape"], "richer_us": t["latency_us"], "simpler_us": s["latency_us"],
                    "speedup": s["latency_us"] / t["latency_us"], "trial_speedups": ratios,
                    "spread": (max(ratios) - min(ratios)) / med if med else 0.0,
                    "richer_bandwidth_fraction": t.get("bandwidth_fraction"),
                    "simpler_bandwidth_fraction": s.get("bandwidth_fraction")})
    return out


def platform_of(env: dict) -> str:
    """The platform a gate result's environment names, as skill scopes and retrieval name platforms:
    the GPU and its compute capability ("NVIDIA H200 (sm_90)"), or the GPU alone without one."""
    gpu = env.get("gpu") or "unknown GPU"
    cap = env.get("capability")
    return f"{gpu} (sm_{str(cap).replace('.', '')})" if cap else gpu
