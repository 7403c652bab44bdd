"""Stress inputs for the RMSNorm instances beyond the contract's shapes (klineage.lineage.probe reads this
table; it lives apart from workload.py so adding a probe leaves the workload's hash unchanged)."""


def _zero_rows(inputs, shape):
    # Every third row all zeros: the output must be exactly 0 there, which needs eps inside the square
    # root (without it 0 * rsqrt(0) is NaN).
    x = inputs["x"].clone()
    x[::3] = 0
    return {**inputs, "x": x}


VALUE_PROBES = {"zero_rows": _zero_rows}
