"""Stress inputs for fmha beyond its contract's shapes (klineage.lineage.probe reads this table; it
lives apart from workload.py so adding a probe leaves the workload's hash unchanged)."""


def _null_sink(inputs, shape):
    # Key 0 of every head is an attention sink whose value row is zero, as the "null" sinks of
    # language models: every query leans along dim 0 and only key 0 has a dim-0 component, so key 0
    # takes ~99.99% of each row's weight and the output is carried by weights of ~1e-7 to 1e-6.
    # v is scaled by 64 (exact in fp16) so that the output lies in fp16's normal range. Such
    # weights are fp16 subnormals: a kernel that rounds p to fp16 for the P.V product loses a few
    # percent of each; one that keeps p in fp32 does not.
    q, k, v = (inputs[n].clone() for n in ("q", "k", "v"))   # [B, H, S, D] fp16
    q[..., 0] = 14.0
    k[..., 0] = 0.0
    k[..., 0, 0] = 14.0
    v[..., 0, :] = 0.0
    return {"q": q, "k": k, "v": v * 64}


VALUE_PROBES = {"null_sink": _null_sink}
