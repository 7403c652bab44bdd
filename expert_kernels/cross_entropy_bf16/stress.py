"""Stress inputs for cross_entropy beyond its contract's shapes (klineage.lineage.probe reads this
table; it lives apart from workload.py so adding a probe leaves the workload's hash unchanged)."""


def _confident_large(inputs, shape):
    # A confident, sharply scaled model: logits x1000 and every label on its row's argmax, so each
    # loss is ~0 and only the absolute error of the max term's exp(x_max - max) = 1 remains. Any
    # rounding in forming that exponent's argument (x*log2e - max*log2e in one FFMA) shows directly.
    logits = inputs["logits"] * 1000.0
    return {"logits": logits.to(inputs["logits"].dtype), "labels": logits.float().argmax(dim=1)}


VALUE_PROBES = {"confident_large": _confident_large}
