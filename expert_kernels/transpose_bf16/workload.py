"""transpose_bf16: out[c, r] = x[r, c] for a row-major bf16 matrix x of rows x cols (out is cols x rows)."""
import torch

NAME = "transpose_bf16"
FAMILY = "transpose"
DTYPES = ("bfloat16",)
ENTRY = "transpose_bf16"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
    {"name": "rows", "kind": "int"},
    {"name": "cols", "kind": "int"},
]
BENCHMARK_CASES = [{"rows": 8192, "cols": 8192}, {"rows": 4096, "cols": 16384}]
# The kernels tile the matrix (32x32 scalar tiles, 128x64 tiles of 16-byte vectors = 8 bf16) and take
# vectors only when both bases are 16-byte aligned and rows, cols are multiples of 8. These shapes hit:
# a single element, a single row or column, sizes that are no multiple of 8 (4x12: multiples of 4 only)
# or of any tile, multiples of 8 that leave partial vector tiles (136x72, 8x8), an exact vector tile,
# and misaligned bases (offset 1, 3: 2 and 6 bytes; offset 4: 8 bytes) next to a base that is 16-byte
# aligned but not 256-byte aligned (offset 8).
PROBE_SHAPES = [
    {"rows": 1, "cols": 1},
    {"rows": 1, "cols": 1000},
    {"rows": 1000, "cols": 1},
    {"rows": 4, "cols": 12},
    {"rows": 16, "cols": 3},
    {"rows": 8, "cols": 8},
    {"rows": 33, "cols": 65},
    {"rows": 128, "cols": 64},
    {"rows": 136, "cols": 72},
    {"rows": 129, "cols": 4097},
    {"rows": 40, "cols": 48, "offset": 1},
    {"rows": 33, "cols": 65, "offset": 3},
    {"rows": 24, "cols": 16, "offset": 4},
    {"rows": 136, "cols": 200, "offset": 8},
]
# A transpose moves values without arithmetic: every bf16 element must come out bit-exact, so any
# element off by more than 1e-6 (relative or of the output's rms) is wrong, and all of them must match.
# A misplaced element is off by O(1) (inputs are unit normals), and an unwritten one stays NaN.
TOLERANCE = {"rtol": 1e-6, "atol": 1e-6, "min_matched": 1.0}
VENDOR_NAME = "torch eager x.t().contiguous() (bf16)"


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["rows"], shape["cols"], generator=g, device=device, dtype=torch.float32)
    return {"x": x.to(torch.bfloat16)}


def outputs(shape):
    return {"out": ((shape["cols"], shape["rows"]), "bfloat16")}


def scalars(shape):
    return {"rows": shape["rows"], "cols": shape["cols"]}


def reference(inputs, shape):
    return {"out": inputs["x"].double().t().contiguous()}


def vendor(inputs, shape):
    return {"out": inputs["x"].t().contiguous()}


def bytes_moved(shape):
    # every element read once and written once: 2 * rows * cols * sizeof(bf16)
    return 2 * shape["rows"] * shape["cols"] * 2


def flops(shape):
    return 0  # data movement only
