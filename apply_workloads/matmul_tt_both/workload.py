"""matmul_tt_both: C = A.T @ B.T with A stored (Nk, Ni) and B (Nj, Nk), fp32: both operands transposed;
the naive kernel names its extents Ni, Nj, Nk."""
from mmops import define

NAME = "matmul_tt_both"
ENTRY = "atbt_product"
A_LAYOUT, B_LAYOUT = "KM", "NK"
SIZES = {"M": "Ni", "N": "Nj", "K": "Nk"}
ROLES = {"a": "A", "b": "B", "out": "C"}
ARGS = [
    {"name": "A", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "B", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "C", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "Ni", "kind": "int"},
    {"name": "Nj", "kind": "int"},
    {"name": "Nk", "kind": "int"},
]
BENCHMARK_CASES = [{"Ni": 1536, "Nj": 1536, "Nk": 2048}]
PROBE_SHAPES = [{"Ni": 1, "Nj": 1, "Nk": 1}, {"Ni": 9, "Nj": 5, "Nk": 7}, {"Ni": 65, "Nj": 130, "Nk": 33},
                {"Ni": 300, "Nj": 24, "Nk": 520}, {"Ni": 16, "Nj": 200, "Nk": 64}]

globals().update(define(globals()))
