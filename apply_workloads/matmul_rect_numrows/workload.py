"""matmul_rect_numrows: C = A * B, A numARows x numAColumns and B numAColumns x numBColumns, fp32; the
naive kernel names its sizes as textbooks do."""
from mmops import define

NAME = "matmul_rect_numrows"
ENTRY = "matrix_multiply"
SIZES = {"M": "numARows", "N": "numBColumns", "K": "numAColumns"}
ROLES = {"a": "A", "b": "B", "out": "C"}
ARGS = [
    {"name": "A", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "B", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "C", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "numARows", "kind": "int"},
    {"name": "numAColumns", "kind": "int"},
    {"name": "numBColumns", "kind": "int"},
]
BENCHMARK_CASES = [{"numARows": 3072, "numAColumns": 1024, "numBColumns": 1024}]
PROBE_SHAPES = [{"numARows": 1, "numAColumns": 1, "numBColumns": 1},
                {"numARows": 7, "numAColumns": 3, "numBColumns": 5},
                {"numARows": 100, "numAColumns": 300, "numBColumns": 17},
                {"numARows": 33, "numAColumns": 64, "numBColumns": 260},
                {"numARows": 520, "numAColumns": 40, "numBColumns": 129}]

globals().update(define(globals()))
