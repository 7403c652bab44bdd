"""softmax_online: softmax over each row of an fp32 (rows, cols) matrix, y = exp(x - max) / sum exp(x - max).

A style-gallery ladder written in the habits of a kernel blog's worklog: templates on the block size,
warp helpers (warpReduceMax / warpReduceSum), `__restrict` spelled the MSVC way, an online softmax,
and a version restarted from an earlier one (recorded in versions/ladder.toml [from])."""
import torch

NAME = "softmax_online"
FAMILY = "reduction"
DTYPES = ("float32",)
ENTRY = "softmax_rows"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "y", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "rows", "kind": "int"},
    {"name": "cols", "kind": "int"},
]
BENCHMARK_CASES = [{"rows": 4096, "cols": 4096}]
# One element, rows shorter than a warp or a block, widths off the float4 and block strides, long
# rows, many short rows; bases 4 and 12 bytes past alignment (the vector path must step aside).
PROBE_SHAPES = [
    {"rows": 1, "cols": 1},
    {"rows": 3, "cols": 7},
    {"rows": 17, "cols": 1023},
    {"rows": 129, "cols": 4097},
    {"rows": 2, "cols": 65536},
    {"rows": 4097, "cols": 33},
    {"rows": 7, "cols": 1000, "offset": 1},
    {"rows": 9, "cols": 4096, "offset": 3},
]
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4, "min_matched": 0.999}
VENDOR_NAME = "torch.softmax(x, dim=1) (fp32)"


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    # a wide spread (std 3) makes the max subtraction matter
    x = torch.randn(shape["rows"], shape["cols"], generator=g, device=device, dtype=torch.float32).mul_(3.0)
    return {"x": x}


def outputs(shape):
    return {"y": ((shape["rows"], shape["cols"]), "float32")}


def scalars(shape):
    return {"rows": shape["rows"], "cols": shape["cols"]}


def reference(inputs, shape):
    return {"y": torch.softmax(inputs["x"].double(), dim=1)}


def vendor(inputs, shape):
    return {"y": torch.softmax(inputs["x"], dim=1)}


def bytes_moved(shape):
    return 4 * 2 * shape["rows"] * shape["cols"]


def flops(shape):
    return 5 * shape["rows"] * shape["cols"]
