"""bmm_16x2048: held-out GEMM instance (issue 8), out[i] = a[i] @ b[i] for 16 batches of
M = N = K = 2048 (torch.bmm); bf16 in and out, fp32 accumulation.

a is batch x M x K and b is batch x K x N, every matrix row-major and the batches dense: torch.bmm's
layout, which flag_gems.ops.bmm takes as it is. out is batch x M x N bf16. The oracle is the float64
batched product of the bf16 inputs; the performance reference is FlagGems' Triton bmm called directly.
No lineage of the library was mined from this instance. Start kernel: heldout/kernels/gemm_mm.cu
(entry `bmm`, shared by every mm, addmm and bmm instance).
"""
from heldout_ops.bmm import define

NAME = "bmm_16x2048"
BENCHMARK_CASES = [{"batch": 16, "M": 2048, "N": 2048, "K": 2048}]
# The mm probes' assumptions (edge tiles in M and N, a partial k-tile, K or N not a multiple of 8, odd N,
# misaligned bases), each with several batches so a wrong batch stride shows; with an odd K or N every
# batch's matrices start at another alignment; one batch of one element.
PROBE_SHAPES = [
    {"batch": 1, "M": 1, "N": 1, "K": 1},
    {"batch": 7, "M": 1, "N": 1, "K": 1},
    {"batch": 3, "M": 7, "N": 9, "K": 13},
    {"batch": 2, "M": 64, "N": 64, "K": 64},
    {"batch": 3, "M": 129, "N": 136, "K": 200},
    {"batch": 4, "M": 130, "N": 257, "K": 200},
    {"batch": 2, "M": 300, "N": 264, "K": 1000},
    {"batch": 5, "M": 65, "N": 72, "K": 1001},
    {"batch": 2, "M": 257, "N": 384, "K": 2048},
    {"batch": 3, "M": 520, "N": 1032, "K": 96},
    {"batch": 3, "M": 200, "N": 136, "K": 264, "offset": 8},
    {"batch": 2, "M": 100, "N": 304, "K": 512, "offset": 1},
    {"batch": 3, "M": 130, "N": 136, "K": 96, "offset": 3},
]

globals().update(define(globals()))
