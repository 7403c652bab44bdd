"""softmax_first_element: output = softmax(input, dim=1) over an fp32 [rows, cols] matrix; the naive
kernel takes the maximum from the row's first element with `if (v > m) m = v;`, writes the
exponentials and divides them in place."""
from rowops import define

NAME = "softmax_first_element"
ENTRY = "softmax_rows"
OP, DIMS, REDUCE = "softmax", ("rows", "cols"), 1
ROLES = {"x": "input", "out": "output"}
ARGS = [
    {"name": "input", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "output", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "rows", "kind": "int"},
    {"name": "cols", "kind": "int64"},
]
BENCHMARK_CASES = [{"rows": 4096, "cols": 4096}]
PROBE_SHAPES = [{"rows": 1, "cols": 1}, {"rows": 3, "cols": 2}, {"rows": 65, "cols": 33}, {"rows": 33, "cols": 1000},
                {"rows": 5, "cols": 4099}, {"rows": 7, "cols": 1023, "offset": 1}]

globals().update(define(globals()))
