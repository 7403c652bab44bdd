"""logsoftmax_wrapped: output = log_softmax(input, dim=1) over an fp32 [num_rows, num_cols] matrix; the
naive kernel's body sits inside its bounds check (`if (row < num_rows) { ... }`)."""
from rowops import define

NAME = "logsoftmax_wrapped"
ENTRY = "log_softmax"
OP, DIMS, REDUCE = "log_softmax", ("num_rows", "num_cols"), 1
ROLES = {"x": "input", "out": "output"}
ARGS = [
    {"name": "input", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "output", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "num_rows", "kind": "int"},
    {"name": "num_cols", "kind": "int"},
]
BENCHMARK_CASES = [{"num_rows": 4096, "num_cols": 4096}]
PROBE_SHAPES = [{"num_rows": 1, "num_cols": 1}, {"num_rows": 3, "num_cols": 7}, {"num_rows": 65, "num_cols": 33},
                {"num_rows": 33, "num_cols": 1000}, {"num_rows": 5, "num_cols": 4099},
                {"num_rows": 7, "num_cols": 1023, "offset": 1}]

globals().update(define(globals()))
