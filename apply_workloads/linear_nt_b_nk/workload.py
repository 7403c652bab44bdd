"""linear_nt_b_nk: output = input @ weight.T, a linear layer without bias (weight stored (out_features,
in_features) as nn.Linear keeps it), fp32. batch_size here counts the rows of one product, not a batch
of products."""
from mmops import define

NAME = "linear_nt_b_nk"
ENTRY = "linear_forward"
A_LAYOUT, B_LAYOUT = "MK", "NK"
SIZES = {"M": "batch_size", "N": "out_features", "K": "in_features"}
ROLES = {"a": "input", "b": "weight", "out": "output"}
ARGS = [
    {"name": "input", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "weight", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "output", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "batch_size", "kind": "int"},
    {"name": "in_features", "kind": "int"},
    {"name": "out_features", "kind": "int"},
]
BENCHMARK_CASES = [{"batch_size": 4096, "in_features": 1024, "out_features": 2048}]
PROBE_SHAPES = [{"batch_size": 1, "in_features": 1, "out_features": 1},
                {"batch_size": 3, "in_features": 10, "out_features": 7},
                {"batch_size": 100, "in_features": 130, "out_features": 65},
                {"batch_size": 17, "in_features": 1000, "out_features": 300},
                {"batch_size": 256, "in_features": 24, "out_features": 136, "offset": 3}]

globals().update(define(globals()))
