"""layernorm_local_index: Y = (X - mean) / sqrt(var + epsilon) * gamma + beta over each row of an fp32
[m, n] matrix; the naive kernel recomputes each element's flat index in every pass."""
from rowops import define

NAME = "layernorm_local_index"
ENTRY = "layer_norm"
OP, DIMS, REDUCE = "layernorm", ("m", "n"), 1
ROLES = {"x": "X", "weight": "gamma", "bias": "beta", "out": "Y"}
ARGS = [
    {"name": "X", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "gamma", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "beta", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "Y", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "m", "kind": "int"},
    {"name": "n", "kind": "int"},
    {"name": "epsilon", "kind": "float"},
]
BENCHMARK_CASES = [{"m": 4096, "n": 4096}]
PROBE_SHAPES = [{"m": 1, "n": 1}, {"m": 3, "n": 7}, {"m": 65, "n": 33}, {"m": 33, "n": 1000}, {"m": 5, "n": 4099},
                {"m": 7, "n": 1023, "offset": 1}]

globals().update(define(globals()))
