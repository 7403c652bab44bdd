"""matmul_rect_ijk: c = a @ b with a (M, K) and b (K, N) fp32, sizes passed in the order M, K, N; the
naive kernel nests its two bounds checks around the body."""
from mmops import define

NAME = "matmul_rect_ijk"
ENTRY = "matmul_forward"
SIZES = {"M": "M", "N": "N", "K": "K"}
ROLES = {"a": "a", "b": "b", "out": "c"}
ARGS = [
    {"name": "a", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "b", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "c", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "M", "kind": "int"},
    {"name": "K", "kind": "int"},
    {"name": "N", "kind": "int"},
]
BENCHMARK_CASES = [{"M": 1024, "K": 4096, "N": 2048}]
PROBE_SHAPES = [{"M": 1, "K": 1, "N": 1}, {"M": 3, "K": 5, "N": 7}, {"M": 100, "K": 1, "N": 33},
                {"M": 257, "K": 130, "N": 129}, {"M": 31, "K": 2048, "N": 17}, {"M": 600, "K": 64, "N": 1001},
                {"M": 40, "K": 104, "N": 72, "offset": 1}]

globals().update(define(globals()))
