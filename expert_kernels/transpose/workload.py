"""transpose: out[c, r] = x[r, c] for a row-major fp32 matrix x of rows x cols (out is cols x rows)."""
import torch

NAME = "transpose"
FAMILY = "transpose"
DTYPES = ("float32",)
ENTRY = "transpose"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "rows", "kind": "int"},
    {"name": "cols", "kind": "int"},
]
BENCHMARK_CASES = [{"rows": 8192, "cols": 8192}, {"rows": 4096, "cols": 16384}]
# The kernels tile the matrix (32x32 scalar tiles, 64x64 float4 tiles) and take 16-byte vectors only
# when both bases are 16-byte aligned and rows, cols are multiples of 4. These shapes hit: a single
# element, a single row or column, sizes that are no multiple of 4 or of any tile, multiples of 4
# that leave partial vector tiles (68x132, 4x4), exact tiles, and misaligned bases (offset 1, 2, 3:
# 4, 8, 12 bytes) next to a base that is 16-byte aligned but not 256-byte aligned (offset 4).
PROBE_SHAPES = [
    {"rows": 1, "cols": 1},
    {"rows": 1, "cols": 1000},
    {"rows": 1000, "cols": 1},
    {"rows": 2, "cols": 6},
    {"rows": 8, "cols": 3},
    {"rows": 4, "cols": 4},
    {"rows": 33, "cols": 65},
    {"rows": 64, "cols": 64},
    {"rows": 68, "cols": 132},
    {"rows": 129, "cols": 4097},
    {"rows": 100, "cols": 36, "offset": 1},
    {"rows": 33, "cols": 65, "offset": 3},
    {"rows": 36, "cols": 68, "offset": 2},
    {"rows": 128, "cols": 256, "offset": 4},
]
# A transpose moves values without arithmetic: every element must be bit-exact, so any element off by
# more than 1e-6 (relative or of the output's rms) is wrong, and all of them must match. A misplaced
# element is off by O(1) (inputs are unit normals), and an unwritten one stays NaN.
TOLERANCE = {"rtol": 1e-6, "atol": 1e-6, "min_matched": 1.0}
VENDOR_NAME = "torch eager x.t().contiguous() (fp32)"


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["rows"], shape["cols"], generator=g, device=device, dtype=torch.float32)
    return {"x": x}


def outputs(shape):
    return {"out": ((shape["cols"], shape["rows"]), "float32")}


def scalars(shape):
    return {"rows": shape["rows"], "cols": shape["cols"]}


def reference(inputs, shape):
    return {"out": inputs["x"].double().t().contiguous()}


def vendor(inputs, shape):
    return {"out": inputs["x"].t().contiguous()}


def bytes_moved(shape):
    # every element read once and written once: 2 * rows * cols * sizeof(float)
    return 2 * shape["rows"] * shape["cols"] * 4


def flops(shape):
    return 0  # data movement only
