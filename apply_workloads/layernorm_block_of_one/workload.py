"""layernorm_block_of_one: output = (input - mean) / sqrt(var + eps) * gamma + beta over each row of an
fp32 [batch_size, hidden] matrix; the naive kernel gives each row a block of one thread."""
from rowops import define

NAME = "layernorm_block_of_one"
ENTRY = "layernorm"
OP, DIMS, REDUCE = "layernorm", ("batch_size", "hidden"), 1
ROLES = {"x": "input", "weight": "gamma", "bias": "beta", "out": "output"}
ARGS = [
    {"name": "input", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "gamma", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "beta", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "output", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "batch_size", "kind": "int"},
    {"name": "hidden", "kind": "int"},
    {"name": "eps", "kind": "float"},
]
BENCHMARK_CASES = [{"batch_size": 4096, "hidden": 2048}]
PROBE_SHAPES = [{"batch_size": 1, "hidden": 1}, {"batch_size": 3, "hidden": 7}, {"batch_size": 65, "hidden": 33},
                {"batch_size": 33, "hidden": 1000}, {"batch_size": 5, "hidden": 4099},
                {"batch_size": 7, "hidden": 1023, "offset": 1}]

globals().update(define(globals()))
