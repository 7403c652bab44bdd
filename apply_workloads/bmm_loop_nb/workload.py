"""bmm_loop_nb: out[b] = x[b] @ y[b] for nb fp32 problems; the naive kernel loops over the problems
inside each thread. Its tolerance is fp32's own (1e-4 of the output's rms): a product on TF32 tensor
cores does not meet it."""
from mmops import TOLERANCES, define

NAME = "bmm_loop_nb"
ENTRY = "bmm"
SIZES = {"batch": "nb", "M": "M", "N": "N", "K": "K"}
ROLES = {"a": "x", "b": "y", "out": "out"}
TOLERANCE = dict(TOLERANCES["fp32"])
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "y", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "nb", "kind": "int"},
    {"name": "M", "kind": "int"},
    {"name": "N", "kind": "int"},
    {"name": "K", "kind": "int"},
]
BENCHMARK_CASES = [{"nb": 8, "M": 1024, "N": 512, "K": 256}]
PROBE_SHAPES = [{"nb": 1, "M": 1, "N": 1, "K": 1}, {"nb": 2, "M": 9, "N": 7, "K": 3}, {"nb": 3, "M": 33, "N": 65, "K": 130},
                {"nb": 1, "M": 300, "N": 20, "K": 513}, {"nb": 6, "M": 16, "N": 136, "K": 40}]

globals().update(define(globals()))
