"""Stress inputs for the Softmax instances beyond the contract's shapes (klineage.lineage.probe reads this
table; it lives apart from workload.py so adding a probe leaves the workload's hash unchanged)."""

import torch


def _one_hot_rows(inputs, shape):
    # Every other row -inf everywhere but one entry: the output is exactly 1 there and 0 elsewhere, so
    # the row maximum must come from the one finite entry and exp(-inf - max) must give 0, not NaN.
    x = inputs["x"].clone()
    rows, cols = x.shape
    keep = torch.arange(rows, device=x.device) * 7 % cols
    hot = x[torch.arange(rows, device=x.device), keep]
    x[::2] = float("-inf")
    x[torch.arange(0, rows, 2, device=x.device), keep[::2]] = hot[::2]
    return {**inputs, "x": x}


VALUE_PROBES = {"one_hot_rows": _one_hot_rows}
