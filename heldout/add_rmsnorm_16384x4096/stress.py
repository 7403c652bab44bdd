"""Stress inputs for the fused add + RMSNorm instance beyond the contract's shapes (klineage.lineage.probe
reads this table; it lives apart from workload.py so adding a probe leaves the workload's hash unchanged)."""


def _cancelling_rows(inputs, shape):
    # Every third row has residual = -x: the sum is exactly 0, so residual_out is 0 and out must be 0
    # too, which needs eps inside the square root (without it 0 * rsqrt(0) is NaN).
    residual = inputs["residual"].clone()
    residual[::3] = -inputs["x"][::3]
    return {**inputs, "residual": residual}


VALUE_PROBES = {"cancelling_rows": _cancelling_rows}
