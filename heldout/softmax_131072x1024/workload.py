"""softmax_131072x1024: held-out Softmax instance (issue 8) over 131072 rows of 1024, along each row:
    out[r, c] = exp(x[r, c] - max_r) / sum_c exp(x[r, c] - max_r)
bf16 in and out, fp32 math. The inputs hold the values a softmax meets: rows of four kinds (index mod 4)
- 0 plain, 1 with about a quarter of the entries -inf (an attention mask; never the whole row), 2 shifted
by +100 (exp overflows without the max subtracted), 3 shifted by -100 (the sum underflows without it) -
each with its own spread (e^-1 .. e^2). The oracle computes in float64 from the bf16 inputs; the
performance reference is FlagGems' Triton softmax called directly (not through flag_gems.use_gems()).
No lineage of the library was mined from this instance. Start kernels: heldout/kernels/softmax_idiom.cu
and softmax_naive.cu (entry `softmax`, shared by the Softmax instances).
"""
from heldout_ops.softmax import define

NAME = "softmax_131072x1024"
BENCHMARK_CASES = [{"rows": 131072, "cols": 1024}]
# The idiom kernels' assumptions, each probed: widths off the 8-element (16-byte) vector, so every row
# starts at another alignment and the kernels fall back to element accesses (7, 33, 1023, 4099); a
# single element; rows shorter than a warp; the widest row one warp keeps in registers (1000 = 125
# vectors) and one vector past it (1032: a block of two warps); a block of five warps whose threads hold
# 3 or 4 vectors (4104 = 513 vectors), one vector past a block's registers (8200: streamed from memory)
# and a long row (20000); many short rows (4097 x 64: a last block with one row); bases 1, 2 and 3
# elements past 16-byte alignment (on widths that are multiples of the vector, too) and one 16-byte
# aligned but not 256-byte aligned (offset 8).
PROBE_SHAPES = [
    {"rows": 1, "cols": 1},
    {"rows": 3, "cols": 7},
    {"rows": 5, "cols": 33},
    {"rows": 129, "cols": 1000},
    {"rows": 64, "cols": 1032},
    {"rows": 11, "cols": 4104},
    {"rows": 17, "cols": 4099},
    {"rows": 7, "cols": 8200},
    {"rows": 3, "cols": 20000},
    {"rows": 4097, "cols": 64},
    {"rows": 17, "cols": 1023, "offset": 1},
    {"rows": 9, "cols": 4096, "offset": 3},
    {"rows": 5, "cols": 12290, "offset": 2},
    {"rows": 33, "cols": 2048, "offset": 8},
]

globals().update(define(globals()))
