"""sum_dim1_strided: out[o, i] = sum_r x[o, r, i] over an fp32 [outer, reduce, inner] tensor (a sum over
a dimension that is not the innermost: its elements lie `inner` apart)."""
from rowops import define

NAME = "sum_dim1_strided"
ENTRY = "sum_dim1"
OP, DIMS, REDUCE = "sum", ("outer", "reduce", "inner"), 1
ROLES = {"x": "x", "out": "out"}
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "outer", "kind": "int"},
    {"name": "reduce", "kind": "int"},
    {"name": "inner", "kind": "int"},
]
BENCHMARK_CASES = [{"outer": 16, "reduce": 1024, "inner": 1024}]
# single elements, output counts off a warp (3 x 33, 2 x 7), a long reduced dimension over three
# columns, and bases one element past 16-byte alignment
PROBE_SHAPES = [{"outer": 1, "reduce": 1, "inner": 1}, {"outer": 3, "reduce": 5, "inner": 33},
                {"outer": 2, "reduce": 300, "inner": 7}, {"outer": 5, "reduce": 64, "inner": 100},
                {"outer": 1, "reduce": 2048, "inner": 3}, {"outer": 2, "reduce": 17, "inner": 31, "offset": 1}]

globals().update(define(globals()))
