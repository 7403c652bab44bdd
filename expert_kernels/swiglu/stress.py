"""Stress inputs for swiglu beyond its contract's shapes (klineage.lineage.probe reads this table; it
lives apart from workload.py so adding a probe leaves the workload's hash unchanged)."""
import torch


def _saturated_gates(inputs, shape):
    # Every 8th gate at the lowest finite bf16, the finite stand-in for -inf that masks use: there
    # silu(a) = a * sigmoid(a) is exactly -0, so out is +-0 whatever b is (the float64 reference
    # gives it exactly). A kernel that forms a * b before the sigmoid's reciprocal overflows the
    # product to +-inf and multiplies it by rcp(inf) = 0: NaN.
    a = inputs["a"].clone()
    a.view(-1)[::8] = torch.finfo(torch.bfloat16).min
    return {**inputs, "a": a}


VALUE_PROBES = {"saturated_gates": _saturated_gates}
