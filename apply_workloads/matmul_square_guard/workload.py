"""matmul_square_guard: C = A @ B for square fp32 matrices of one size N; the naive kernel's body sits
inside its bounds check."""
from mmops import define

NAME = "matmul_square_guard"
ENTRY = "matmul_square"
SIZES = {"M": "N", "N": "N", "K": "N"}
ROLES = {"a": "A", "b": "B", "out": "C"}
ARGS = [
    {"name": "A", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "B", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "C", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "N", "kind": "int"},
]
BENCHMARK_CASES = [{"N": 2048}]
# a single element, sizes off every tile (16, 32, 64, 128) and off a multiple of 8 (a row not a whole
# number of 16-byte chunks), and one off by one from a tile; bases 4 and 12 bytes past 16-byte alignment
PROBE_SHAPES = [{"N": 1}, {"N": 7}, {"N": 33}, {"N": 100}, {"N": 129}, {"N": 257}, {"N": 520},
                {"N": 100, "offset": 1}, {"N": 136, "offset": 3}]

globals().update(define(globals()))
