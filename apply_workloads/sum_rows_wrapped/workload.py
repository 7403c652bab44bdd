"""sum_rows_wrapped: output[b] = sum_j input[b, j] over an fp32 [batch_size, dim] matrix; the naive
kernel's body sits inside its bounds check (`if (idx < batch_size) { ... }`)."""
from rowops import define

NAME = "sum_rows_wrapped"
ENTRY = "sum_last_dim"
OP, DIMS, REDUCE = "sum", ("batch_size", "dim"), 1
ROLES = {"x": "input", "out": "output"}
ARGS = [
    {"name": "input", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "output", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "batch_size", "kind": "int"},
    {"name": "dim", "kind": "int"},
]
BENCHMARK_CASES = [{"batch_size": 4096, "dim": 4096}]
# a single element, rows shorter than a warp and than a vector, a row count off every block size,
# long odd rows, and bases one element past 16-byte alignment
PROBE_SHAPES = [{"batch_size": 1, "dim": 1}, {"batch_size": 3, "dim": 7}, {"batch_size": 65, "dim": 33},
                {"batch_size": 33, "dim": 1000}, {"batch_size": 5, "dim": 4099},
                {"batch_size": 7, "dim": 1023, "offset": 1}]

globals().update(define(globals()))
