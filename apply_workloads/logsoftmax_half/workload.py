"""logsoftmax_half: y = log_softmax(x, dim=1) over an fp16 [n_rows, n_cols] matrix, fp32 math; the
naive kernel's bounds check reads `n_rows <= r`."""
from rowops import define

NAME = "logsoftmax_half"
ENTRY = "log_softmax_half"
OP, DIMS, REDUCE = "log_softmax", ("n_rows", "n_cols"), 1
ROLES = {"x": "x", "out": "y"}
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "float16", "role": "in"},
    {"name": "y", "kind": "ptr", "dtype": "float16", "role": "out"},
    {"name": "n_rows", "kind": "int"},
    {"name": "n_cols", "kind": "int"},
]
BENCHMARK_CASES = [{"n_rows": 8192, "n_cols": 4096}]
PROBE_SHAPES = [{"n_rows": 1, "n_cols": 1}, {"n_rows": 3, "n_cols": 7}, {"n_rows": 65, "n_cols": 33},
                {"n_rows": 33, "n_cols": 1000}, {"n_rows": 5, "n_cols": 4099},
                {"n_rows": 7, "n_cols": 1023, "offset": 3}]

globals().update(define(globals()))
