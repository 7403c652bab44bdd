"""rowsum_blocks: the sum of each row of an fp32 (rows, cols) matrix, out[r] = sum_c x[r, c].

A style-gallery ladder written in the habits of a vendor's reduction samples, applied to rows: a
block per row with a shared-memory tree, the tree unrolled completely on a template block size
(`if (blockSize >= 512) ...` chains, a `volatile` last warp), the last warp moved to shuffles, and
float4 loads. No version declares what it adds except the block-per-row restructuring, which no
detector can see. Inputs are small integers, so every partial sum is exact in fp32 and any order
of additions gives the same result. The float4 rungs need cols a multiple of 4 and 16-byte aligned
rows (DOMAIN)."""
import torch

NAME = "rowsum_blocks"
FAMILY = "reduction"
DTYPES = ("float32",)
ENTRY = "row_sum"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "rows", "kind": "int"},
    {"name": "cols", "kind": "int"},
]
DOMAIN = {"multiple_of": {"cols": 4}, "aligned_bytes": 16}
BENCHMARK_CASES = [{"rows": 4096, "cols": 8192}]
# One float4, rows shorter than a warp or a block, widths off the block stride, a long row, many
# short rows, a base 16 bytes off alignment; two shapes outside DOMAIN (cols = 7; a base 4 bytes
# off), which are not run.
PROBE_SHAPES = [
    {"rows": 1, "cols": 4},
    {"rows": 3, "cols": 36},
    {"rows": 17, "cols": 1000},
    {"rows": 2, "cols": 65536},
    {"rows": 4097, "cols": 12},
    {"rows": 9, "cols": 4100, "offset": 4},
    {"rows": 5, "cols": 7},
    {"rows": 7, "cols": 1000, "offset": 1},
]
TOLERANCE = {"rtol": 1e-6, "atol": 1e-6, "min_matched": 1.0}
VENDOR_NAME = "torch x.sum(dim=1) (fp32)"


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    # integers in [-8, 8]: every partial sum of a row is exact in fp32
    x = torch.randint(-8, 9, (shape["rows"], shape["cols"]), generator=g, device=device).to(torch.float32)
    return {"x": x}


def outputs(shape):
    return {"out": ((shape["rows"],), "float32")}


def scalars(shape):
    return {"rows": shape["rows"], "cols": shape["cols"]}


def reference(inputs, shape):
    return {"out": inputs["x"].double().sum(dim=1)}


def vendor(inputs, shape):
    return {"out": inputs["x"].sum(dim=1)}


def bytes_moved(shape):
    return 4 * shape["rows"] * (shape["cols"] + 1)


def flops(shape):
    return shape["rows"] * shape["cols"]
