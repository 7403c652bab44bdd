"""bmm_gridx_B: out[i] = lhs[i] @ rhs[i] for B fp32 problems; the naive kernel takes the problem from
blockIdx.x (columns and rows on y and z) and checks all three indices."""
from mmops import define

NAME = "bmm_gridx_B"
ENTRY = "bmm_forward"
SIZES = {"batch": "B", "M": "M", "N": "N", "K": "K"}
ROLES = {"a": "lhs", "b": "rhs", "out": "out"}
ARGS = [
    {"name": "lhs", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "rhs", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "B", "kind": "int"},
    {"name": "M", "kind": "int"},
    {"name": "N", "kind": "int"},
    {"name": "K", "kind": "int"},
]
BENCHMARK_CASES = [{"B": 16, "M": 256, "N": 1024, "K": 768}]
PROBE_SHAPES = [{"B": 1, "M": 1, "N": 1, "K": 1}, {"B": 4, "M": 5, "N": 3, "K": 11}, {"B": 2, "M": 129, "N": 31, "K": 64},
                {"B": 3, "M": 8, "N": 520, "K": 100}, {"B": 2, "M": 72, "N": 80, "K": 1000, "offset": 3}]

globals().update(define(globals()))
