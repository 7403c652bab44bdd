"""bmm_gridz_batchsize: C[b] = A[b] @ B[b] for batch_size fp32 problems of m x k and k x n; the naive
kernel takes the problem from the grid's z index and checks only the row and column."""
from mmops import define

NAME = "bmm_gridz_batchsize"
ENTRY = "batched_matmul"
SIZES = {"batch": "batch_size", "M": "m", "N": "n", "K": "k"}
ROLES = {"a": "A", "b": "B", "out": "C"}
ARGS = [
    {"name": "A", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "B", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "C", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "batch_size", "kind": "int"},
    {"name": "m", "kind": "int"},
    {"name": "k", "kind": "int"},
    {"name": "n", "kind": "int"},
]
BENCHMARK_CASES = [{"batch_size": 32, "m": 512, "k": 512, "n": 512}]
PROBE_SHAPES = [{"batch_size": 1, "m": 1, "k": 1, "n": 1}, {"batch_size": 3, "m": 7, "k": 5, "n": 9},
                {"batch_size": 2, "m": 65, "k": 130, "n": 33}, {"batch_size": 5, "m": 128, "k": 1, "n": 128},
                {"batch_size": 4, "m": 100, "k": 260, "n": 72}, {"batch_size": 2, "m": 40, "k": 64, "n": 48, "offset": 1}]

globals().update(define(globals()))
