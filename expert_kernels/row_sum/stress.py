"""Stress inputs for row_sum beyond its contract's shapes (klineage.lineage.probe reads this table; it
lives apart from workload.py so adding a probe leaves the workload's hash unchanged)."""
import torch

# 2^125: eight of them still fit fp32 (FLT_MAX is ~2^128), sixteen of one sign overflow.
_PAIR_MAGNITUDE = 2.0 ** 125


def _cancelling_pairs(inputs, shape):
    # Every third row alternates +M, -M, +M, ... (an odd last column is 0), so its sum is exactly 0.
    # The whole row is multiples of M, so every partial sum in any order is an exact small multiple
    # of M in float64: the reference is exact. A serial fp32 sum in column order stays within one M;
    # a reduction that gives each lane a strided subset of columns sums same-sign terms, and a lane
    # of 16 or more overflows to +-inf: the row becomes inf - inf = NaN.
    x = inputs["x"].clone()
    cols = x.shape[1]
    even = cols - cols % 2
    signs = torch.ones(even, device=x.device, dtype=x.dtype)
    signs[1::2] = -1.0
    x[::3, :even] = signs * _PAIR_MAGNITUDE
    x[::3, even:] = 0.0
    return {**inputs, "x": x}


VALUE_PROBES = {"cancelling_pairs": _cancelling_pairs}
