"""Stress inputs for gdn beyond its contract's shapes (klineage.lineage.probe reads this table; it
lives apart from workload.py so adding a probe leaves the workload's hash unchanged; its names start
with an underscore because its text is appended to workload.py's)."""
import torch


def _hard_resets(inputs, shape):
    # A decay of exactly 0 (g = log 0 = -inf, within the contract's g <= 0) every 333 tokens from
    # token 100, as at the document boundaries of a packed sequence: the state is wiped there. The
    # positions fall at different offsets inside the 64-token chunks. The float64 recurrence gives
    # decay exp(-inf) = 0 and stays exact and finite. A chunked form built on differences of
    # in-chunk cumulative gates G_i - G_j meets -inf - (-inf) = NaN after a reset.
    g = inputs["g"].clone()              # [B, T, HV] fp32
    g[:, 100::333, :] = float("-inf")
    return {**inputs, "g": g}


VALUE_PROBES = {"hard_resets": _hard_resets}

# The large_magnitude probe scales v alone: q and k are unit vectors, beta a gate in [0, 1] and g the
# log of a decay, so x1000 on them leaves the contract (every kernel then failed it alike); the
# values may have any magnitude, and o and the state scale with them.
LARGE_MAGNITUDE_INPUTS = ("v",)
