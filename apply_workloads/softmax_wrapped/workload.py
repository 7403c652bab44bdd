"""softmax_wrapped: result = softmax(matrix, dim=1) over an fp32 [M, N] matrix; the naive kernel's body
sits inside its bounds check and indexes each pass through a local offset."""
from rowops import define

NAME = "softmax_wrapped"
ENTRY = "softmax_forward"
OP, DIMS, REDUCE = "softmax", ("M", "N"), 1
ROLES = {"x": "matrix", "out": "result"}
ARGS = [
    {"name": "matrix", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "result", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "M", "kind": "int"},
    {"name": "N", "kind": "int"},
]
BENCHMARK_CASES = [{"M": 4096, "N": 4096}]
PROBE_SHAPES = [{"M": 1, "N": 1}, {"M": 3, "N": 7}, {"M": 65, "N": 33}, {"M": 33, "N": 1000},
                {"M": 5, "N": 4099}, {"M": 7, "N": 1023, "offset": 1}]

globals().update(define(globals()))
