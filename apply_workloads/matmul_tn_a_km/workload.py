"""matmul_tn_a_km: C = A.T @ B with A stored (K, M) and B (K, N), fp32 (a product with its first operand
transposed); the naive kernel reads A down its columns."""
from mmops import define

NAME = "matmul_tn_a_km"
ENTRY = "matmul_at_b"
A_LAYOUT, B_LAYOUT = "KM", "KN"
SIZES = {"M": "M", "N": "N", "K": "K"}
ROLES = {"a": "A", "b": "B", "out": "C"}
ARGS = [
    {"name": "A", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "B", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "C", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "M", "kind": "int"},
    {"name": "N", "kind": "int"},
    {"name": "K", "kind": "int"},
]
BENCHMARK_CASES = [{"M": 2048, "N": 2048, "K": 1024}]
PROBE_SHAPES = [{"M": 1, "N": 1, "K": 1}, {"M": 7, "N": 13, "K": 9}, {"M": 130, "N": 66, "K": 257},
                {"M": 33, "N": 520, "K": 64}, {"M": 1000, "N": 8, "K": 40}, {"M": 72, "N": 96, "K": 104, "offset": 1}]

globals().update(define(globals()))
