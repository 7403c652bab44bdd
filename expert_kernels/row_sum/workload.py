"""row_sum: each fp32 row summed to one value. out[r] = sum_c x[r, c]."""
import torch

NAME = "row_sum"
FAMILY = "reduction"
DTYPES = ("float32",)
ENTRY = "row_sum"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "rows", "kind": "int"},
    {"name": "cols", "kind": "int"},
]
BENCHMARK_CASES = [{"rows": 16384, "cols": 4096}, {"rows": 1024, "cols": 131072}]
# Sizes that break vector-width, warp and block-tile assumptions, a single row, tiny rows; misaligned
# bases (offset 1, 3: 4 and 12 bytes past alignment) on the warp-per-row and the long-row path.
PROBE_SHAPES = [
    {"rows": 1, "cols": 1},
    {"rows": 3, "cols": 7},
    {"rows": 129, "cols": 1000},
    {"rows": 1000, "cols": 4099},
    {"rows": 7, "cols": 131073},
    {"rows": 4097, "cols": 33},
    {"rows": 17, "cols": 1023, "offset": 1},
    {"rows": 3, "cols": 20000, "offset": 3},
]
# fp32 sums of up to 131072 terms: summation order moves the result by ~1e-6 of the row scale;
# a bf16/fp16 shortcut moves it by ~1e-3, so 1e-4 separates the two.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4, "min_matched": 0.999}
VENDOR_NAME = "torch eager x.sum(dim=1) (fp32)"


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    # A non-zero mean keeps row sums away from zero so relative error means something.
    x = torch.randn(shape["rows"], shape["cols"], generator=g, device=device, dtype=torch.float32)
    return {"x": x.add_(0.25)}


def outputs(shape):
    return {"out": ((shape["rows"],), "float32")}


def scalars(shape):
    return {"rows": shape["rows"], "cols": shape["cols"]}


def reference(inputs, shape):
    return {"out": inputs["x"].double().sum(dim=1)}


def vendor(inputs, shape):
    return {"out": inputs["x"].sum(dim=1)}


def bytes_moved(shape):
    return 4 * shape["rows"] * shape["cols"] + 4 * shape["rows"]


def flops(shape):
    return shape["rows"] * shape["cols"]
