"""rmsnorm_wrapped: y = x / sqrt(mean(x^2) + eps) * w over each token of an fp32 [num_tokens,
hidden_size] matrix, eps 1e-6; the naive kernel's body sits inside its bounds check."""
from rowops import define

NAME = "rmsnorm_wrapped"
ENTRY = "rms_norm"
OP, DIMS, REDUCE = "rmsnorm", ("num_tokens", "hidden_size"), 1
EPS = 1e-6
ROLES = {"x": "x", "weight": "w", "out": "y"}
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "w", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "y", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "num_tokens", "kind": "int"},
    {"name": "hidden_size", "kind": "int"},
    {"name": "eps", "kind": "float"},
]
BENCHMARK_CASES = [{"num_tokens": 4096, "hidden_size": 4096}]
PROBE_SHAPES = [{"num_tokens": 1, "hidden_size": 1}, {"num_tokens": 3, "hidden_size": 7},
                {"num_tokens": 65, "hidden_size": 33}, {"num_tokens": 33, "hidden_size": 1000},
                {"num_tokens": 5, "hidden_size": 4099}, {"num_tokens": 7, "hidden_size": 1023, "offset": 1}]

globals().update(define(globals()))
