"""softmax_16384x4096: held-out Softmax instance (issue 8) over 16384 rows of 4096, along each row:
    out[r, c] = exp(x[r, c] - max_r) / sum_c exp(x[r, c] - max_r)
bf16 in and out, fp32 math. The inputs hold the values a softmax meets: rows of four kinds (index mod 4)
- 0 plain, 1 with about a quarter of the entries -inf (an attention mask; never the whole row), 2 shifted
by +100 (exp overflows without the max subtracted), 3 shifted by -100 (the sum underflows without it) -
each with its own spread (e^-1 .. e^2). The oracle computes in float64 from the bf16 inputs; the
performance reference is FlagGems' Triton softmax called directly (not through flag_gems.use_gems()).
No lineage of the library was mined from this instance. Start kernels: heldout/kernels/softmax_idiom.cu
and softmax_naive.cu (entry `softmax`, shared by the Softmax instances).
"""
import torch

NAME = "softmax_16384x4096"
FAMILY = "reduction"
DTYPES = ("bfloat16",)
ENTRY = "softmax"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
    {"name": "rows", "kind": "int"},
    {"name": "cols", "kind": "int"},
]
SHIFT = 100.0
MASKED = 0.25  # fraction of a masked row's entries set to -inf
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
# bf16 output: one rounding is at most 2^-8 (0.39%) relative; in fp32, x - max costs at most one fp32
# rounding, a fast exp2 adds ~2^-22 relative and a sum of up to 20000 positive terms ~1e-6, so rtol 8e-3
# leaves room for a second rounding. There is no cancellation (every term is positive), so every element of an fp32
# kernel is within rtol and min_matched is 1.0; atol (1e-3 of the rms) covers entries that underflow
# and the masked ones, which must come out 0. A sum accumulated serially in bf16 stalls and fails; a
# kernel without the max subtracted returns inf / NaN on the shifted rows; a masked entry taken as 0
# instead of -inf, all-zero and copied outputs fail.
TOLERANCE = {"rtol": 8e-3, "atol": 1e-3, "min_matched": 1.0}
VENDOR_NAME = ("FlagGems flag_gems.ops.softmax(x, -1) (Triton, called directly; bf16 in and out, fp32 math)")
VENDOR_FALLBACK = ("torch.compile of torch.softmax(x.float(), -1).bfloat16(), dynamic=False (one fused Triton "
                   "reduction kernel)")
# Start kernels, relative to the heldout/ folder.
STARTS = {"idiom": "kernels/softmax_idiom.cu", "naive": "kernels/softmax_naive.cu"}


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    rows, cols = shape["rows"], shape["cols"]
    spread = torch.rand(rows, 1, generator=g, device=device).mul_(3.0).sub_(1.0).exp_()
    x = torch.randn(rows, cols, generator=g, device=device).mul_(spread)
    x[2::4] += SHIFT
    x[3::4] -= SHIFT
    mask = torch.rand(rows, cols, generator=g, device=device) < MASKED
    keep = torch.randint(0, cols, (rows,), generator=g, device=device)
    mask[torch.arange(rows, device=device), keep] = False  # a masked row keeps at least one entry
    row_kind = torch.arange(rows, device=device) % 4
    mask &= (row_kind == 1)[:, None]
    x.masked_fill_(mask, float("-inf"))
    return {"x": x.to(torch.bfloat16)}


def outputs(shape):
    return {"out": ((shape["rows"], shape["cols"]), "bfloat16")}


def scalars(shape):
    return {"rows": shape["rows"], "cols": shape["cols"]}


def reference(inputs, shape):
    return {"out": torch.softmax(inputs["x"].double(), dim=1)}


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
    softmax = _flag_gems("flag_gems.ops", "softmax")
    return {"out": _checked("flag_gems.ops.softmax", softmax(inputs["x"], -1), (shape["rows"], shape["cols"]))}


_fallback = None  # compiled on the first vendor_fallback call


def _softmax(x):
    return torch.softmax(x.float(), dim=-1).to(torch.bfloat16)


def vendor_fallback(inputs, shape):
    """The reference the issue allows when FlagGems fails: torch.compile's Triton kernel (VENDOR_FALLBACK)."""
    global _fallback
    if _fallback is None:
        _fallback = torch.compile(_softmax, dynamic=False, fullgraph=True)
    return {"out": _fallback(inputs["x"])}


def bytes_moved(shape):
    # x read once and out written once, bf16
    return 2 * 2 * shape["rows"] * shape["cols"]


def flops(shape):
    # per element: max compare, subtract, exp, add, multiply by the inverse sum
    return 5 * shape["rows"] * shape["cols"]
