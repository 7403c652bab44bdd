"""matmul_square_flat: c = a @ b for square fp32 matrices of one size; the naive kernel runs a 1-D grid
and splits its flat index into a row and a column."""
from mmops import define

NAME = "matmul_square_flat"
ENTRY = "sgemm"
SIZES = {"M": "size", "N": "size", "K": "size"}
ROLES = {"a": "a", "b": "b", "out": "c"}
ARGS = [
    {"name": "a", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "b", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "c", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "size", "kind": "int"},
]
BENCHMARK_CASES = [{"size": 2048}]
PROBE_SHAPES = [{"size": 1}, {"size": 3}, {"size": 31}, {"size": 65}, {"size": 200}, {"size": 511},
                {"size": 1000}]

globals().update(define(globals()))
