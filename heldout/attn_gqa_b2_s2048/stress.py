"""Stress inputs for attn_gqa_b2_s2048 beyond its contract's shapes (klineage.lineage.probe reads this table;
it lives apart from workload.py so adding a probe leaves the workload's hash unchanged). The contract's
own inputs already plant scores near +-141 (see make_inputs)."""
import torch


def _large_scores(inputs, shape):
    # q x 8: scores ~ N(0, 64), softmax close to one-hot on most rows but not all; exp() of the
    # unshifted scores overflows fp32 on most rows, and fp16 P holds many subnormal weights
    return {**inputs, "q": (inputs["q"].float() * 8.0).to(inputs["q"].dtype)}


def _equal_scores(inputs, shape):
    # q = 0: every visible key weighs the same, so out is the running mean of v; a kernel whose
    # normaliser misses or doubles a tile's share shows at once
    return {**inputs, "q": torch.zeros_like(inputs["q"])}


VALUE_PROBES = {"large_scores": _large_scores, "equal_scores": _equal_scores}
