"""matmul_square_rowx: c = a * b for square fp32 matrices; the naive kernel puts the row on
threadIdx.x, returns early off the matrix, reads through temporaries, and launches from a host helper."""
from mmops import define

NAME = "matmul_square_rowx"
ENTRY = "square_matmul"
SIZES = {"M": "n", "N": "n", "K": "n"}
ROLES = {"a": "a", "b": "b", "out": "c"}
ARGS = [
    {"name": "a", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "b", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "c", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "n", "kind": "int"},
]
BENCHMARK_CASES = [{"n": 2048}]
PROBE_SHAPES = [{"n": 1}, {"n": 5}, {"n": 17}, {"n": 64}, {"n": 130}, {"n": 300}, {"n": 33, "offset": 1}]

globals().update(define(globals()))
