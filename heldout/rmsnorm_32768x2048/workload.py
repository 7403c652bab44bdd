"""rmsnorm_32768x2048: held-out RMSNorm instance (issue 8) over 32768 rows of 2048:
    out[r, c] = x[r, c] / sqrt(mean_c(x[r, :]^2) + eps) * weight[c],   eps = 1e-6
bf16 in and out, fp32 math. The oracle computes in float64 from the bf16 inputs; the performance
reference is FlagGems' Triton rms_norm called directly (not through flag_gems.use_gems(), whose entry
re-registers every operator). No lineage of the library was mined from this instance. Start kernels:
heldout/kernels/rmsnorm_idiom.cu and rmsnorm_naive.cu (entry `rmsnorm`, shared by the RMSNorm instances).
"""
from heldout_ops.rmsnorm import define

NAME = "rmsnorm_32768x2048"
BENCHMARK_CASES = [{"rows": 32768, "cols": 2048}]
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
