"""layernorm_cg: LayerNorm over the last dimension of an fp32 (N, C) matrix,
out[n, c] = (x[n, c] - mean_n) / sqrt(var_n + 1e-5) * weight[c] + bias[c] (biased variance).

A style-gallery ladder written in the habits of a hobby training codebase: one kernel per idea,
cooperative groups for the warp, bundled commits, gaps in the numbering. Its vectorized rungs read
rows as float4, so the kernels are valid only where C is a multiple of 4 and every base is 16-byte
aligned: the workload says so in DOMAIN, and the probe shapes a user copies from elsewhere that
break it (C = 7, a base one float off) are not run."""
import torch
import torch.nn.functional as F

NAME = "layernorm_cg"
FAMILY = "normalization"
DTYPES = ("float32",)
ENTRY = "layernorm_forward"
ARGS = [
    {"name": "inp", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "weight", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "bias", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "N", "kind": "int"},
    {"name": "C", "kind": "int"},
]
DOMAIN = {"multiple_of": {"C": 4}, "aligned_bytes": 16}
BENCHMARK_CASES = [{"N": 16384, "C": 1024}]
# One row, rows narrower than a warp's 32 float4 packs, C off the warp stride, many short rows,
# C past the register path (the expert's fallback), a base 16 bytes off alignment; and two shapes
# outside DOMAIN (C = 7; a base 4 bytes off), which are not run.
PROBE_SHAPES = [
    {"N": 1, "C": 4},
    {"N": 3, "C": 36},
    {"N": 129, "C": 1000},
    {"N": 4097, "C": 64},
    {"N": 7, "C": 4100},
    {"N": 33, "C": 520, "offset": 4},
    {"N": 5, "C": 7},
    {"N": 17, "C": 1024, "offset": 1},
]
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4, "min_matched": 0.999}
VENDOR_NAME = "torch F.layer_norm(inp, (C,), weight, bias, eps=1e-5) (fp32)"
EPS = 1e-5


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    n, c = shape["N"], shape["C"]
    # a row offset keeps the mean away from zero, so a wrong mean shows
    inp = torch.randn(n, c, generator=g, device=device, dtype=torch.float32).add_(0.5)
    weight = torch.rand(c, generator=g, device=device, dtype=torch.float32).add_(0.5)
    bias = torch.randn(c, generator=g, device=device, dtype=torch.float32).mul_(0.1)
    return {"inp": inp, "weight": weight, "bias": bias}


def outputs(shape):
    return {"out": ((shape["N"], shape["C"]), "float32")}


def scalars(shape):
    return {"N": shape["N"], "C": shape["C"]}


def reference(inputs, shape):
    x = inputs["inp"].double()
    return {"out": F.layer_norm(x, (shape["C"],), inputs["weight"].double(), inputs["bias"].double(), eps=EPS)}


def vendor(inputs, shape):
    return {"out": F.layer_norm(inputs["inp"], (shape["C"],), inputs["weight"], inputs["bias"], eps=EPS)}


def bytes_moved(shape):
    return 4 * (2 * shape["N"] * shape["C"] + 2 * shape["C"])


def flops(shape):
    return 8 * shape["N"] * shape["C"]
