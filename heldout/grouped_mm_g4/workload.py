"""grouped_mm_g4: held-out grouped GEMM instance (issue 8), G = 4 groups over 4096 rows of a, K = N = 4096,
each group its own weight (torch._grouped_mm(a, b, offs) with a 2-D a and a 3-D b); bf16 in and out,
fp32 accumulation:
    out[offs[g-1]:offs[g], :] = a[offs[g-1]:offs[g], :] @ b[g]     (offs[-1] = 0)

a is M x K row-major, b is G x K x N (each group's weight row-major K x N: the layout
flag_gems.ops.group_mm and torch._grouped_mm take), offs holds the groups' cumulative row ends as int32 on
the device (as torch passes them), out is M x N bf16. The split is uneven and fixed by the shape (the
same for every seed): group weights 1.25, 0.75, 1.0625, 0.9375 of M / G repeating, so the groups hold
1280, 768, 1088 and 960 rows: the 1088- and 960-row groups are not a multiple of a
128-row tile. The optional shape key "empty" (1) empties groups 0 and 2 (their rows go to the others).
The oracle is the float64 product per group; the performance reference is FlagGems' Triton group_mm
called directly. No lineage of the library was mined from this instance. Start kernel:
heldout/kernels/gemm_grouped.cu (entry `grouped_mm`).
"""
from heldout_ops.grouped_mm import define

NAME = "grouped_mm_g4"
BENCHMARK_CASES = [{"groups": 4, "M": 4096, "N": 4096, "K": 4096}]
# The mm probes' assumptions (edge tiles, a partial k-tile, K or N not a multiple of 8, odd N, misaligned
# bases) with groups whose sizes are not multiples of a tile, so a tile never straddles two groups
# unnoticed; fewer rows than groups (empty groups from the split: M = 3 over 4 groups leaves group 0
# empty, M = 1 groups 0-2), emptied groups at the front and in the middle (key "empty"), one group, and
# a long K.
PROBE_SHAPES = [
    {"groups": 4, "M": 3, "N": 8, "K": 8},
    {"groups": 4, "M": 1, "N": 1, "K": 1},
    {"groups": 1, "M": 129, "N": 136, "K": 200},
    {"groups": 2, "M": 130, "N": 136, "K": 64},
    {"groups": 4, "M": 1000, "N": 520, "K": 264},
    {"groups": 8, "M": 777, "N": 200, "K": 72},
    {"groups": 3, "M": 500, "N": 301, "K": 100},
    {"groups": 5, "M": 333, "N": 129, "K": 1001},
    {"groups": 4, "M": 600, "N": 256, "K": 4096},
    {"groups": 4, "M": 1024, "N": 1024, "K": 1024, "empty": 1},
    {"groups": 8, "M": 300, "N": 72, "K": 40, "empty": 1},
    {"groups": 4, "M": 256, "N": 136, "K": 72, "offset": 8},
    {"groups": 5, "M": 300, "N": 264, "K": 128, "offset": 1},
    {"groups": 3, "M": 130, "N": 136, "K": 96, "offset": 3},
]

globals().update(define(globals()))
