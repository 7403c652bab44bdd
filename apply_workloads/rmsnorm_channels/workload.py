"""rmsnorm_channels: output = input / sqrt(mean_c(input^2) + eps) * weight[c] over the channels
(dimension 1) of an fp32 [batch, channels, spatial] tensor, eps 1e-5: a normalisation over a strided
dimension."""
from rowops import define

NAME = "rmsnorm_channels"
ENTRY = "rmsnorm_channels"
OP, DIMS, REDUCE = "rmsnorm", ("batch", "channels", "spatial"), 1
ROLES = {"x": "input", "weight": "weight", "out": "output"}
ARGS = [
    {"name": "input", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "weight", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "output", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "batch", "kind": "int"},
    {"name": "channels", "kind": "int"},
    {"name": "spatial", "kind": "int"},
    {"name": "eps", "kind": "float"},
]
BENCHMARK_CASES = [{"batch": 16, "channels": 256, "spatial": 4096}]
PROBE_SHAPES = [{"batch": 1, "channels": 1, "spatial": 1}, {"batch": 3, "channels": 5, "spatial": 33},
                {"batch": 2, "channels": 300, "spatial": 7}, {"batch": 5, "channels": 64, "spatial": 100},
                {"batch": 1, "channels": 2048, "spatial": 3},
                {"batch": 2, "channels": 17, "spatial": 31, "offset": 1}]

globals().update(define(globals()))
