"""layernorm_16384x4096: held-out LayerNorm instance (issue 8) over 16384 rows of 4096:
    out[r, c] = (x[r, c] - mean_r) / sqrt(var_r + eps) * weight[c] + bias[c],   eps = 1e-5
with mean_r and the biased var_r over row r; bf16 in and out, fp32 math. The oracle computes in float64
from the bf16 inputs; the performance reference is FlagGems' Triton layer_norm called directly (not
through flag_gems.use_gems()). No lineage of the library was mined from this instance. Start kernels:
heldout/kernels/layernorm_idiom.cu and layernorm_naive.cu (entry `layernorm`, shared by the LayerNorm
instances).
"""
import torch
import torch.nn.functional as F

NAME = "layernorm_16384x4096"
FAMILY = "reduction"
DTYPES = ("bfloat16",)
ENTRY = "layernorm"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "weight", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "bias", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
    {"name": "rows", "kind": "int"},
    {"name": "cols", "kind": "int"},
    {"name": "eps", "kind": "float"},
]
EPS = 1e-5  # torch's default
BENCHMARK_CASES = [{"rows": 16384, "cols": 4096}]
# The idiom kernels' assumptions, each probed: widths off the 8-element (16-byte) vector, so every row
# starts at another alignment and the kernels fall back to element accesses (7, 33, 1023, 4099); a
# single element; rows shorter than a warp; the widest row one warp keeps in registers (1000 = 125
# vectors) and one vector past it (1032: a block of two warps); a block of five warps whose threads hold
# 3 or 4 vectors (4104 = 513 vectors), one vector past a block's registers (8200: streamed from memory)
# and a long row (20000); many short rows (4097 x 64: a last block with one row); bases 1, 2 and 3
# elements past 16-byte alignment (on widths that are multiples of the vector, too) and one 16-byte
# aligned but not 256-byte aligned (offset 8).
PROBE_SHAPES = [
    {"rows": 1, "cols": 1},
    {"rows": 3, "cols": 7},
    {"rows": 5, "cols": 33},
    {"rows": 129, "cols": 1000},
    {"rows": 64, "cols": 1032},
    {"rows": 11, "cols": 4104},
    {"rows": 17, "cols": 4099},
    {"rows": 7, "cols": 8200},
    {"rows": 3, "cols": 20000},
    {"rows": 4097, "cols": 64},
    {"rows": 17, "cols": 1023, "offset": 1},
    {"rows": 9, "cols": 4096, "offset": 3},
    {"rows": 5, "cols": 12290, "offset": 2},
    {"rows": 33, "cols": 2048, "offset": 8},
]
# bf16 output: one rounding is at most 2^-8 (0.39%) relative; rtol 8e-3 is twice that. fp32 statistics
# (two passes, Welford, or even E[x^2] - mean^2 at these rows' mean / spread of at most ~25) stay well
# inside it. Where weight * xhat cancels bias the relative error means nothing; atol is 1e-3 of the
# output's rms, above the fp32 error there (~1e-6) and far below a wrong statistic. (A kernel that
# rounds xhat to bf16 before the affine step fails where it cancels; FlagGems computes
# weight * (x - mean) * rstd + bias in fp32 and rounds once.) Every element of an fp32 kernel passes, so
# min_matched is 1.0 (one wrong row or column fails). Statistics accumulated serially in bf16, a
# variance without the mean removed, a missing bias, all-zero and copied outputs fail.
TOLERANCE = {"rtol": 8e-3, "atol": 1e-3, "min_matched": 1.0}
VENDOR_NAME = ("FlagGems flag_gems.ops.layer_norm(x, [cols], weight, bias, eps)[0] (Triton, called directly; bf16 "
               "in and out, fp32 math; the mean and rstd it also returns are not used)")
VENDOR_FALLBACK = ("torch.compile of F.layer_norm(x.float(), (cols,), weight.float(), bias.float(), eps).bfloat16(), "
                   "dynamic=False (one fused Triton reduction kernel)")
# Start kernels, relative to the heldout/ folder.
STARTS = {"idiom": "kernels/layernorm_idiom.cu", "naive": "kernels/layernorm_naive.cu"}


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    rows, cols = shape["rows"], shape["cols"]
    # each row with its own mean (N(0, 2^2)) and spread (e^-1 .. e^1): the mean matters and differs per row
    mean = torch.randn(rows, 1, generator=g, device=device).mul_(2.0)
    spread = torch.rand(rows, 1, generator=g, device=device).mul_(2.0).sub_(1.0).exp_()
    x = torch.randn(rows, cols, generator=g, device=device).mul_(spread).add_(mean)
    weight = torch.randn(cols, generator=g, device=device).mul_(0.5).add_(1.0)
    bias = torch.randn(cols, generator=g, device=device).mul_(0.5)
    return {"x": x.to(torch.bfloat16), "weight": weight.to(torch.bfloat16), "bias": bias.to(torch.bfloat16)}


def outputs(shape):
    return {"out": ((shape["rows"], shape["cols"]), "bfloat16")}


def scalars(shape):
    return {"rows": shape["rows"], "cols": shape["cols"], "eps": EPS}


def reference(inputs, shape):
    x = inputs["x"].double()
    centered = x - x.mean(dim=1, keepdim=True)
    xhat = centered * torch.rsqrt(centered.square().mean(dim=1, keepdim=True) + EPS)
    return {"out": xhat * inputs["weight"].double() + inputs["bias"].double()}


_vendor_fn = None  # the FlagGems function, imported on the first vendor call


def _flag_gems(module, attr):
    """`module.attr` of flag-gems, imported on first use (the wheel travels to the GPU machine with
    sqlalchemy and greenlet; it is not installed where no GPU is). Raises RuntimeError naming what is
    missing instead of falling back to anything silently."""
    global _vendor_fn
    if _vendor_fn is None:
        import importlib

        try:
            mod = importlib.import_module(module)
        except Exception as exc:  # any import failure (missing wheel, triton mismatch) is reported as such
            raise RuntimeError(f"{NAME}: cannot import {module} ({type(exc).__name__}: {exc}); install the "
                               "flag-gems wheel with sqlalchemy and greenlet, or time vendor_fallback "
                               f"({VENDOR_FALLBACK})") from exc
        fn = getattr(mod, attr, None)
        if not callable(fn):
            raise RuntimeError(f"{NAME}: {module}.{attr} does not exist in this flag-gems version; time "
                               f"vendor_fallback ({VENDOR_FALLBACK}) and say so in the report")
        _vendor_fn = fn
    return _vendor_fn


def _checked(op, out, dims):
    """`out` when it is a bf16 tensor of `dims`; otherwise a RuntimeError naming the mismatch (a FlagGems
    signature that changed must not pass unnoticed)."""
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(dims) or out.dtype != torch.bfloat16:
        got = (tuple(out.shape), out.dtype) if isinstance(out, torch.Tensor) else type(out).__name__
        raise RuntimeError(f"{NAME}: {op} returned {got}, expected a bf16 tensor of shape {tuple(dims)}: the "
                           "flag-gems signature differs from the one this workload was written against")
    return out


def vendor(inputs, shape):
    layer_norm = _flag_gems("flag_gems.ops", "layer_norm")
    res = layer_norm(inputs["x"], [shape["cols"]], inputs["weight"], inputs["bias"], EPS)
    out = res[0] if isinstance(res, (tuple, list)) else res  # (y, mean, rstd) in flag-gems 2.x-5.x
    return {"out": _checked("flag_gems.ops.layer_norm", out, (shape["rows"], shape["cols"]))}


_fallback = None  # compiled on the first vendor_fallback call


def _layer_norm(x, weight, bias):
    return F.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(), EPS).to(torch.bfloat16)


def vendor_fallback(inputs, shape):
    """The reference the issue allows when FlagGems fails: torch.compile's Triton kernel (VENDOR_FALLBACK)."""
    global _fallback
    if _fallback is None:
        _fallback = torch.compile(_layer_norm, dynamic=False, fullgraph=True)
    return {"out": _fallback(inputs["x"], inputs["weight"], inputs["bias"])}


def bytes_moved(shape):
    # x read once and out written once (bf16), weight and bias read once
    return 2 * 2 * shape["rows"] * shape["cols"] + 2 * 2 * shape["cols"]


def flops(shape):
    # per element: add (mean), subtract, square, add (variance), multiply by rstd and weight, add bias
    return 7 * shape["rows"] * shape["cols"]
