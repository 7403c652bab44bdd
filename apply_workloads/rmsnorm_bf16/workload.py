"""rmsnorm_bf16: out = inp / sqrt(mean(inp^2) + epsilon) * gain over each row of a bf16 [rows, dim]
matrix, fp32 math, eps 1e-6, output first."""
from rowops import define

NAME = "rmsnorm_bf16"
ENTRY = "rmsnorm_bf16"
OP, DIMS, REDUCE = "rmsnorm", ("rows", "dim"), 1
EPS = 1e-6
ROLES = {"x": "inp", "weight": "gain", "out": "out"}
ARGS = [
    {"name": "out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
    {"name": "inp", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "gain", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "rows", "kind": "int"},
    {"name": "dim", "kind": "int"},
    {"name": "epsilon", "kind": "float"},
]
BENCHMARK_CASES = [{"rows": 8192, "dim": 4096}]
PROBE_SHAPES = [{"rows": 1, "dim": 1}, {"rows": 3, "dim": 7}, {"rows": 65, "dim": 33}, {"rows": 33, "dim": 1000},
                {"rows": 5, "dim": 4099}, {"rows": 7, "dim": 1023, "offset": 3}]

globals().update(define(globals()))
