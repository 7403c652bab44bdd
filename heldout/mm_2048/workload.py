"""mm_2048: held-out GEMM instance (issue 8), out = a @ b with M = N = K = 2048; bf16 in and out,
fp32 accumulation (torch.mm).

a is M x K and b is K x N, both row-major: torch.mm's layout, which flag_gems.ops.mm takes as it is.
out is M x N row-major bf16. The oracle is the float64 product of the bf16 inputs; the performance
reference is FlagGems' Triton mm called directly (not through flag_gems.use_gems(), whose entry
re-registers every operator). No lineage of the library was mined from this instance. Start kernel:
heldout/kernels/gemm_mm.cu (entry `mm`, shared by every mm, addmm and bmm instance).
"""
from heldout_ops.mm import define

NAME = "mm_2048"
BENCHMARK_CASES = [{"M": 2048, "N": 2048, "K": 2048}]
# The idiom kernel's assumptions, each probed: M and N not multiples of any tile (64 / 128 / 256); K
# not a multiple of the 32- or 64-wide k-tile (a partial last k-tile, zero-filled); K or N not a
# multiple of 8, so a row is not a whole number of 16-byte chunks and the cp.async path cannot describe
# the matrix (element-wise loads); a single element; K of 1; a tall-skinny and a short-wide product; N
# odd (no paired bf16 stores); a long K (the stage ring wraps many times); several waves of tiles with
# partial edge tiles; bases 1 and 3 elements past 16-byte alignment, and one 16-byte aligned but not
# 256-byte aligned (offset 8) on the cp.async path.
PROBE_SHAPES = [
    {"M": 1, "N": 1, "K": 1},
    {"M": 7, "N": 9, "K": 13},
    {"M": 64, "N": 64, "K": 64},
    {"M": 129, "N": 257, "K": 200},
    {"M": 130, "N": 136, "K": 200},
    {"M": 300, "N": 500, "K": 1000},
    {"M": 1000, "N": 1000, "K": 1001},
    {"M": 4097, "N": 256, "K": 256},
    {"M": 33, "N": 4104, "K": 520},
    {"M": 257, "N": 384, "K": 4096},
    {"M": 2048, "N": 2056, "K": 328},
    {"M": 1500, "N": 1096, "K": 1096, "offset": 8},
    {"M": 200, "N": 304, "K": 512, "offset": 1},
    {"M": 130, "N": 136, "K": 96, "offset": 3},
]

globals().update(define(globals()))
