"""logsoftmax_flat_rows: out = log_softmax(logits, dim=-1) over fp32 logits [B, T, V]; the naive kernel
indexes the B * T rows flat, output argument first."""
from rowops import define

NAME = "logsoftmax_flat_rows"
ENTRY = "logsoftmax_forward"
OP, DIMS, REDUCE = "log_softmax", ("B", "T", "V"), 2
ROLES = {"x": "logits", "out": "out"}
ARGS = [
    {"name": "out", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "logits", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "B", "kind": "int"},
    {"name": "T", "kind": "int"},
    {"name": "V", "kind": "int"},
]
BENCHMARK_CASES = [{"B": 4, "T": 1024, "V": 4096}]
PROBE_SHAPES = [{"B": 1, "T": 1, "V": 1}, {"B": 1, "T": 3, "V": 7}, {"B": 5, "T": 13, "V": 33},
                {"B": 3, "T": 11, "V": 1000}, {"B": 1, "T": 5, "V": 4099}, {"B": 7, "T": 1, "V": 1023, "offset": 1}]

globals().update(define(globals()))
