"""softmax_rows: softmax over each row of an fp32 (N, C) matrix, out = exp(inp - max) / sum exp(inp - max).

A style-gallery ladder written in the habits of a hobby training codebase's kernel worklog: one
numbered kernel per idea (`softmax_forward_kernelN`), a thread per row first, an online softmax
tried early and abandoned (the block-per-row kernel restarts from the first one, recorded in
versions/ladder.toml [from]), warp helpers, an online softmax merged by a combine operator, and a
commit that bundles float4 loads with the fast exponential. The float4 rungs read rows as float4,
so the kernels are valid where C is a multiple of 4 and every base is 16-byte aligned (DOMAIN)."""
import torch

NAME = "softmax_rows"
FAMILY = "reduction"
DTYPES = ("float32",)
ENTRY = "softmax_forward"
ARGS = [
    {"name": "inp", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "N", "kind": "int"},
    {"name": "C", "kind": "int"},
]
DOMAIN = {"multiple_of": {"C": 4}, "aligned_bytes": 16}
BENCHMARK_CASES = [{"N": 8192, "C": 2048}]
# One row of one float4, rows shorter than a warp or a block, C off the block stride, long rows,
# many short rows, a base 16 bytes off alignment; two shapes outside DOMAIN (C = 7; a base 4 bytes
# off), which are not run.
PROBE_SHAPES = [
    {"N": 1, "C": 4},
    {"N": 3, "C": 36},
    {"N": 17, "C": 1000},
    {"N": 129, "C": 4100},
    {"N": 2, "C": 32768},
    {"N": 4097, "C": 32},
    {"N": 9, "C": 4096, "offset": 4},
    {"N": 5, "C": 7},
    {"N": 7, "C": 1000, "offset": 1},
]
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5, "min_matched": 0.999}
VENDOR_NAME = "torch.softmax(inp, dim=-1) (fp32)"


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    # a wide spread (std 4) and a per-row shift make the max subtraction matter
    inp = torch.randn(shape["N"], shape["C"], generator=g, device=device, dtype=torch.float32).mul_(4.0)
    inp += torch.randn(shape["N"], 1, generator=g, device=device, dtype=torch.float32).mul_(20.0)
    return {"inp": inp}


def outputs(shape):
    return {"out": ((shape["N"], shape["C"]), "float32")}


def scalars(shape):
    return {"N": shape["N"], "C": shape["C"]}


def reference(inputs, shape):
    return {"out": torch.softmax(inputs["inp"].double(), dim=-1)}


def vendor(inputs, shape):
    return {"out": torch.softmax(inputs["inp"], dim=-1)}


def bytes_moved(shape):
    return 4 * 2 * shape["N"] * shape["C"]


def flops(shape):
    return 5 * shape["N"] * shape["C"]
