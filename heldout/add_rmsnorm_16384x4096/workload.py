"""add_rmsnorm_16384x4096: held-out fused residual add + RMSNorm instance (issue 8) over 16384 rows of 4096, the
computation of FlagGems' fused_add_rms_norm:
    residual_out = x + residual                                   (rounded to bf16: it is stored)
    out[r, c] = residual_out[r, c] / sqrt(mean_c(residual_out[r, :]^2) + eps) * weight[c],   eps = 1e-6
bf16 in and out, fp32 math. FlagGems works in place (out into x, residual_out into residual); the
contract gives the two outputs their own buffers, and the probes with the key "alias" pass them as the
very buffers of x and residual, so every kernel must also be right in place. The oracle computes in
float64 from the bf16 inputs (the sum unrounded); the performance reference is FlagGems'
flag_gems.fused.fused_add_rms_norm called directly, which overwrites x and residual: the gate refreshes
every input buffer before each timed call, so that costs nothing, but a caller that wants the inputs
afterwards must copy them first. No lineage of the library was mined from this instance. Start kernels:
heldout/kernels/add_rmsnorm_idiom.cu and add_rmsnorm_naive.cu (entry `add_rmsnorm`).
"""
import torch

NAME = "add_rmsnorm_16384x4096"
FAMILY = "reduction"
DTYPES = ("bfloat16",)
ENTRY = "add_rmsnorm"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "residual", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "weight", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
    {"name": "residual_out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
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
# aligned but not 256-byte aligned (offset 8). The
# in-place call (key "alias": out in x's buffer, residual_out in residual's) on a row one warp holds, a
# row a block holds and a streamed row.
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
    {"rows": 9, "cols": 1000, "alias": 1},
    {"rows": 37, "cols": 4096, "alias": 1},
    {"rows": 3, "cols": 20001, "alias": 1},
]
# bf16 outputs: one rounding is at most 2^-8 (0.39%) relative. residual_out is the sum rounded once. out
# may be normalized from the stored (rounded) sum or from the fp32 one, and rounded to bf16 before the
# weight multiply (as FlagGems does) or after: up to three roundings, 1.2e-2, which rtol admits; fp32
# math adds ~1e-6. Both outputs are products or sums of same-scale values without cancellation beyond
# what atol (1e-3 of the rms) covers, so every element of such a kernel passes and min_matched is 1.0.
# A missing residual add moves every element by about its own size; a sum of squares accumulated
# serially in bf16 stalls; all-zero and copied outputs fail.
TOLERANCE = {"rtol": 1.2e-2, "atol": 1e-3, "min_matched": 1.0}
VENDOR_NAME = ("FlagGems flag_gems.fused.fused_add_rms_norm(x, residual, [cols], weight, eps) (Triton, called "
               "directly; in place: out into x, residual_out into residual; bf16 in and out, fp32 math)")
VENDOR_FALLBACK = ("torch.compile of h = x.float() + residual.float(); (h * rsqrt(mean(h^2, -1) + eps) * "
                   "weight.float()).bfloat16(), h.bfloat16(), dynamic=False (one fused Triton kernel, two new "
                   "outputs instead of in place)")
# Start kernels, relative to the heldout/ folder.
STARTS = {"idiom": "kernels/add_rmsnorm_idiom.cu", "naive": "kernels/add_rmsnorm_naive.cu"}


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    rows, cols = shape["rows"], shape["cols"]
    # each row at its own scale, e^-2 .. e^2: normalizing by another row's statistics fails
    scale = torch.rand(rows, 1, generator=g, device=device).mul_(4.0).sub_(2.0).exp_()
    x = torch.randn(rows, cols, generator=g, device=device).mul_(scale)
    # the residual stream of the same row scale: the add moves every element by about its size
    residual = torch.randn(rows, cols, generator=g, device=device).mul_(scale)
    weight = torch.randn(cols, generator=g, device=device).mul_(0.5).add_(1.0)
    return {"x": x.to(torch.bfloat16), "residual": residual.to(torch.bfloat16), "weight": weight.to(torch.bfloat16)}


def outputs(shape):
    dims = (shape["rows"], shape["cols"])
    return {"out": (dims, "bfloat16"), "residual_out": (dims, "bfloat16")}


def scalars(shape):
    return {"rows": shape["rows"], "cols": shape["cols"], "eps": EPS}


def reference(inputs, shape):
    h = inputs["x"].double() + inputs["residual"].double()
    out = h * torch.rsqrt(h.square().mean(dim=1, keepdim=True) + EPS) * inputs["weight"].double()
    return {"out": out, "residual_out": h}


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
    """FlagGems' in-place op on the given buffers: x becomes out, residual becomes residual_out."""
    fused_add_rms_norm = _flag_gems("flag_gems.fused.fused_add_rms_norm", "fused_add_rms_norm")
    res = fused_add_rms_norm(inputs["x"], inputs["residual"], [shape["cols"]], inputs["weight"], EPS)
    if not isinstance(res, (tuple, list)) or len(res) != 2:
        raise RuntimeError(f"{NAME}: fused_add_rms_norm returned {type(res).__name__}, expected (x, residual): "
                           "the flag-gems signature differs from the one this workload was written against")
    dims = (shape["rows"], shape["cols"])
    return {"out": _checked("fused_add_rms_norm (out)", res[0], dims),
            "residual_out": _checked("fused_add_rms_norm (residual)", res[1], dims)}


_fallback = None  # compiled on the first vendor_fallback call


def _add_rms_norm(x, residual, weight):
    h = x.float() + residual.float()
    out = h * torch.rsqrt(h.square().mean(dim=-1, keepdim=True) + EPS) * weight.float()
    return out.to(torch.bfloat16), h.to(torch.bfloat16)


def vendor_fallback(inputs, shape):
    """The reference the issue allows when FlagGems fails: torch.compile's Triton kernel (VENDOR_FALLBACK)."""
    global _fallback
    if _fallback is None:
        _fallback = torch.compile(_add_rms_norm, dynamic=False, fullgraph=True)
    out, residual_out = _fallback(inputs["x"], inputs["residual"], inputs["weight"])
    return {"out": out, "residual_out": residual_out}


def bytes_moved(shape):
    # x and residual read once, out and residual_out written once (bf16), the weight read once
    return 4 * 2 * shape["rows"] * shape["cols"] + 2 * shape["cols"]


def flops(shape):
    # per element: add, square, add, and two multiplies (by the inverse rms and the weight)
    return 5 * shape["rows"] * shape["cols"]
