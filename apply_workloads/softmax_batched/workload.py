"""softmax_batched: y = softmax(x, dim=-1) over an fp32 [batch, seq, dim] tensor; the naive kernel
takes the batch from blockIdx.y of a 2-D grid and uses __expf."""
from rowops import define

NAME = "softmax_batched"
ENTRY = "softmax_3d"
OP, DIMS, REDUCE = "softmax", ("batch", "seq", "dim"), 2
ROLES = {"x": "x", "out": "y"}
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "y", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "batch", "kind": "int"},
    {"name": "seq", "kind": "int"},
    {"name": "dim", "kind": "int"},
]
BENCHMARK_CASES = [{"batch": 8, "seq": 1024, "dim": 2048}]
PROBE_SHAPES = [{"batch": 1, "seq": 1, "dim": 1}, {"batch": 2, "seq": 3, "dim": 7}, {"batch": 3, "seq": 65, "dim": 33},
                {"batch": 2, "seq": 33, "dim": 1000}, {"batch": 1, "seq": 5, "dim": 4099},
                {"batch": 2, "seq": 7, "dim": 1023, "offset": 1}]

globals().update(define(globals()))
