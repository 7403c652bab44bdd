"""attn_gqa_b2_s2048: held-out attention (issue 8), causal GQA 4:1, batch 2, seq 2048, FP16, head dim 128.

out[b, h] = softmax(q[b, h] @ k[b, h // g].T / sqrt(128) + causal mask) @ v[b, h // g], g = heads //
kv_heads, with q and out [batch, heads, seq, 128] and k and v [batch, kv_heads, seq, 128],
contiguous (the layout torch SDPA takes). Heads: 32 query heads and 8 kv heads (GQA 4:1, causal, as
the anchors' "GQA 32/8 causal"). The benchmark case is the published held-out check's causal GQA
(B2, S2048), 32 heads. The oracle is the float64 computation on the fp16 inputs; the performance
reference is FlagGems' Triton attention called directly (h200-anchors.md: torch SDPA 150 us,
FlagGems 262 us).
"""
from heldout_ops.attention import define

NAME = "attn_gqa_b2_s2048"
CAUSAL = True
GQA = True  # fewer kv heads than query heads: query head h reads kv head h // (heads // kv_heads)
BENCHMARK_CASES = [{'batch': 2, 'heads': 32, 'kv_heads': 8, 'seq': 2048}]
# seq_q == seq_k always. Sequences off every tile size (1, 17, 77, 100, 130, 257, 1000: partial query
# and key tiles, a single row, keys past the end that must be masked and zero-filled), one that is a
# whole number of 64- and 128-row tiles (640), several query tiles and several turns of a copy ring
# (640, 1000), batch and head indexing (4 query heads per kv head), a base 1 element past 16-byte alignment
# (offset 1: no 16-byte vector or cp.async access is legal) and one 16-byte aligned but not
# 256-byte aligned (offset 8).
PROBE_SHAPES = [
    {'batch': 1, 'heads': 4, 'kv_heads': 1, 'seq': 1},
    {'batch': 2, 'heads': 4, 'kv_heads': 1, 'seq': 17},
    {'batch': 1, 'heads': 8, 'kv_heads': 2, 'seq': 100},
    {'batch': 2, 'heads': 4, 'kv_heads': 1, 'seq': 257},
    {'batch': 1, 'heads': 4, 'kv_heads': 1, 'seq': 640},
    {'batch': 1, 'heads': 8, 'kv_heads': 2, 'seq': 1000},
    {'batch': 2, 'heads': 4, 'kv_heads': 1, 'seq': 77, 'offset': 1},
    {'batch': 1, 'heads': 4, 'kv_heads': 1, 'seq': 130, 'offset': 8},
]

globals().update(define(globals()))
