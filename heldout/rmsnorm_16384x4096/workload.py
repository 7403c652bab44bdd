"""rmsnorm_16384x4096: held-out RMSNorm instance (issue 8) over 16384 rows of 4096:
    out[r, c] = x[r, c] / sqrt(mean_c(x[r, :]^2) + eps) * weight[c],   eps = 1e-6
bf16 in and out, fp32 math. The oracle computes in float64 from the bf16 inputs; the performance
reference is FlagGems' Triton rms_norm called directly (not through flag_gems.use_gems(), whose entry
re-registers every operator). No lineage of the library was mined from this instance. Start kernels:
heldout/kernels/rmsnorm_idiom.cu and rmsnorm_naive.cu (entry `rmsnorm`, shared by the RMSNorm instances).
"""
import torch

NAME = "rmsnorm_16384x4096"
FAMILY = "reduction"
DTYPES = ("bfloat16",)
ENTRY = "rmsnorm"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "weight", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
    {"name": "rows", "kind": "int"},
    {"name": "cols", "kind": "int"},
    {"name": "eps", "kind": "float"},
]
EPS = 1e-6  # Llama's
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
# bf16 output: one rounding is at most 2^-8 (0.39%) relative; the fp32 math before it (a sum of up to
# 20000 squares in any order, an approximate rsqrt) adds ~1e-6. Rounding the normalized value to bf16
# before the weight multiply, as FlagGems does, rounds twice: up to 7.8e-3, which rtol 8e-3 admits. The
# output is a product (no cancellation), so every element of such a kernel is within rtol and
# min_matched is 1.0 (one wrong row or column fails); atol (1e-3 of the rms) only covers values that
# underflow. A sum of squares accumulated serially in bf16 stalls and fails; a mean over a wrong count
# shows on the narrow probe rows (7 columns taken as 8: 7%); all-zero and copied outputs fail.
TOLERANCE = {"rtol": 8e-3, "atol": 1e-3, "min_matched": 1.0}
VENDOR_NAME = ("FlagGems flag_gems.ops.rms_norm(x, [cols], weight, eps) (Triton, called directly; bf16 in and "
               "out, fp32 math)")
VENDOR_FALLBACK = ("torch.compile of (x.float() * rsqrt(mean(x.float()^2, -1) + eps) * weight.float()).bfloat16(), "
                   "dynamic=False (one fused Triton reduction kernel)")
# Start kernels, relative to the heldout/ folder.
STARTS = {"idiom": "kernels/rmsnorm_idiom.cu", "naive": "kernels/rmsnorm_naive.cu"}


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    rows, cols = shape["rows"], shape["cols"]
    # each row at its own scale, e^-2 .. e^2: normalizing by another row's statistics fails
    scale = torch.rand(rows, 1, generator=g, device=device).mul_(4.0).sub_(2.0).exp_()
    x = torch.randn(rows, cols, generator=g, device=device).mul_(scale)
    weight = torch.randn(cols, generator=g, device=device).mul_(0.5).add_(1.0)
    return {"x": x.to(torch.bfloat16), "weight": weight.to(torch.bfloat16)}


def outputs(shape):
    return {"out": ((shape["rows"], shape["cols"]), "bfloat16")}


def scalars(shape):
    return {"rows": shape["rows"], "cols": shape["cols"], "eps": EPS}


def reference(inputs, shape):
    x = inputs["x"].double()
    return {"out": x * torch.rsqrt(x.square().mean(dim=1, keepdim=True) + EPS) * inputs["weight"].double()}


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
    rms_norm = _flag_gems("flag_gems.ops", "rms_norm")
    out = rms_norm(inputs["x"], [shape["cols"]], inputs["weight"], EPS)
    return {"out": _checked("flag_gems.ops.rms_norm", out, (shape["rows"], shape["cols"]))}


_fallback = None  # compiled on the first vendor_fallback call


def _rms_norm(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + EPS) * weight.float()).to(torch.bfloat16)


def vendor_fallback(inputs, shape):
    """The reference the issue allows when FlagGems fails: torch.compile's Triton kernel (VENDOR_FALLBACK)."""
    global _fallback
    if _fallback is None:
        _fallback = torch.compile(_rms_norm, dynamic=False, fullgraph=True)
    return {"out": _fallback(inputs["x"], inputs["weight"])}


def bytes_moved(shape):
    # x read once and out written once (bf16), the weight read once
    return 2 * 2 * shape["rows"] * shape["cols"] + 2 * shape["cols"]


def flops(shape):
    # per element: square, add, and two multiplies (by the inverse rms and the weight)
    return 4 * shape["rows"] * shape["cols"]
