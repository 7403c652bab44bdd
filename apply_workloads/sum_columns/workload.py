"""sum_columns: s[c] = sum_r a[r, c] over an fp32 [n_rows, n_cols] matrix (a sum over dimension 0: a
column's elements lie n_cols apart), 64-bit extents, accumulated in double by the naive kernel."""
from rowops import define

NAME = "sum_columns"
ENTRY = "column_sums"
OP, DIMS, REDUCE = "sum", ("n_rows", "n_cols"), 0
ROLES = {"x": "a", "out": "s"}
ARGS = [
    {"name": "a", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "s", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "n_rows", "kind": "int64"},
    {"name": "n_cols", "kind": "int64"},
]
BENCHMARK_CASES = [{"n_rows": 16384, "n_cols": 1024}]
# a single element, column counts off a warp (3, 33, 5), a long column, a wide short matrix, and
# bases one element past 16-byte alignment
PROBE_SHAPES = [{"n_rows": 1, "n_cols": 1}, {"n_rows": 7, "n_cols": 3}, {"n_rows": 1000, "n_cols": 33},
                {"n_rows": 4099, "n_cols": 5}, {"n_rows": 3, "n_cols": 1100},
                {"n_rows": 9, "n_cols": 65, "offset": 1}]

globals().update(define(globals()))
