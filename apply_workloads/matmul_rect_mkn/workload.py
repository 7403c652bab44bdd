"""matmul_rect_mkn: C = A @ B with A [M, K] and B [K, N] fp32; the naive kernel returns early off the
matrix. Its tolerance is fp32's own (1e-4 of the output's rms): a product on TF32 tensor cores does not
meet it."""
from mmops import TOLERANCES, define

NAME = "matmul_rect_mkn"
ENTRY = "gemm"
SIZES = {"M": "M", "N": "N", "K": "K"}
ROLES = {"a": "A", "b": "B", "out": "C"}
TOLERANCE = dict(TOLERANCES["fp32"])
ARGS = [
    {"name": "A", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "B", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "C", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "M", "kind": "int"},
    {"name": "N", "kind": "int"},
    {"name": "K", "kind": "int"},
]
BENCHMARK_CASES = [{"M": 2048, "N": 3072, "K": 1024}]
# a single element, K of 1, sizes off every tile and off a multiple of 8, a tall-skinny and a short-wide
# product, a long K; bases off 16-byte alignment
PROBE_SHAPES = [{"M": 1, "N": 1, "K": 1}, {"M": 7, "N": 9, "K": 13}, {"M": 64, "N": 64, "K": 1},
                {"M": 129, "N": 257, "K": 200}, {"M": 1000, "N": 24, "K": 72}, {"M": 17, "N": 1030, "K": 96},
                {"M": 65, "N": 40, "K": 2500}, {"M": 130, "N": 136, "K": 96, "offset": 3}]

globals().update(define(globals()))
