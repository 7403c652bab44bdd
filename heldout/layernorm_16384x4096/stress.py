"""Stress inputs for the LayerNorm instances beyond the contract's shapes (klineage.lineage.probe reads
this table; it lives apart from workload.py so adding a probe leaves the workload's hash unchanged)."""


def _constant_rows(inputs, shape):
    # Every third row one repeated value: zero variance, so the output is the bias exactly, provided the
    # mean is removed before squaring (and eps keeps rsqrt finite).
    x = inputs["x"].clone()
    x[::3] = x[::3, :1]
    return {**inputs, "x": x}


VALUE_PROBES = {"constant_rows": _constant_rows}
