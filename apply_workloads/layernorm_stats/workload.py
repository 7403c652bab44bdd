"""layernorm_stats: out = (inp - mean) * rstd * weight + bias over each row of an fp32 [N, C] matrix,
eps 1e-5, also writing each row's mean and rstd (outputs first, as training code's forward kernels
take them)."""
from rowops import define

NAME = "layernorm_stats"
ENTRY = "layernorm_forward"
OP, DIMS, REDUCE = "layernorm", ("N", "C"), 1
ROLES = {"x": "inp", "weight": "weight", "bias": "bias", "out": "out", "mean": "mean", "rstd": "rstd"}
ARGS = [
    {"name": "out", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "mean", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "rstd", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "inp", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "weight", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "bias", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "N", "kind": "int"},
    {"name": "C", "kind": "int"},
]
BENCHMARK_CASES = [{"N": 4096, "C": 4096}]
PROBE_SHAPES = [{"N": 1, "C": 1}, {"N": 3, "C": 7}, {"N": 65, "C": 33}, {"N": 33, "C": 1000}, {"N": 5, "C": 4099},
                {"N": 7, "C": 1023, "offset": 1}]

globals().update(define(globals()))
