"""grouped_mm_g4: held-out grouped GEMM instance (issue 8), G = 4 groups over 4096 rows of a, K = N = 4096,
each group its own weight (torch._grouped_mm(a, b, offs) with a 2-D a and a 3-D b); bf16 in and out,
fp32 accumulation:
    out[offs[g-1]:offs[g], :] = a[offs[g-1]:offs[g], :] @ b[g]     (offs[-1] = 0)

a is M x K row-major, b is G x K x N (each group's weight row-major K x N: the layout
flag_gems.ops.group_mm and torch._grouped_mm take), offs holds the groups' cumulative row ends as int32 on
the device (as torch passes them), out is M x N bf16. The split is uneven and fixed by the shape (the
same for every seed): group weights 1.25, 0.75, 1.0625, 0.9375 of M / G repeating, so the groups hold
1280, 768, 1088 and 960 rows: the 1088- and 960-row groups are not a multiple of a
128-row tile. The optional shape key "empty" (1) empties groups 0 and 2 (their rows go to the others).
The oracle is the float64 product per group; the performance reference is FlagGems' Triton group_mm
called directly. No lineage of the library was mined from this instance. Start kernel:
heldout/kernels/gemm_grouped.cu (entry `grouped_mm`).
"""
from fractions import Fraction

import torch

NAME = "grouped_mm_g4"
FAMILY = "gemm"
DTYPES = ("bfloat16", "int32")
ENTRY = "grouped_mm"
ARGS = [
    {"name": "a", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "b", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "offs", "kind": "ptr", "dtype": "int32", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
    {"name": "groups", "kind": "int"},
    {"name": "M", "kind": "int"},
    {"name": "N", "kind": "int"},
    {"name": "K", "kind": "int"},
]
BENCHMARK_CASES = [{"groups": 4, "M": 4096, "N": 4096, "K": 4096}]
# The mm probes' assumptions (edge tiles, a partial k-tile, K or N not a multiple of 8, odd N, misaligned
# bases) with groups whose sizes are not multiples of a tile, so a tile never straddles two groups
# unnoticed; fewer rows than groups (empty groups from the split: M = 3 over 4 groups leaves group 0
# empty, M = 1 groups 0-2), emptied groups at the front and in the middle (key "empty"), one group, and
# a long K.
PROBE_SHAPES = [
    {"groups": 4, "M": 3, "N": 8, "K": 8},
    {"groups": 4, "M": 1, "N": 1, "K": 1},
    {"groups": 1, "M": 129, "N": 136, "K": 200},
    {"groups": 2, "M": 130, "N": 136, "K": 64},
    {"groups": 4, "M": 1000, "N": 520, "K": 264},
    {"groups": 8, "M": 777, "N": 200, "K": 72},
    {"groups": 3, "M": 500, "N": 301, "K": 100},
    {"groups": 5, "M": 333, "N": 129, "K": 1001},
    {"groups": 4, "M": 600, "N": 256, "K": 4096},
    {"groups": 4, "M": 1024, "N": 1024, "K": 1024, "empty": 1},
    {"groups": 8, "M": 300, "N": 72, "K": 40, "empty": 1},
    {"groups": 4, "M": 256, "N": 136, "K": 72, "offset": 8},
    {"groups": 5, "M": 300, "N": 264, "K": 128, "offset": 1},
    {"groups": 3, "M": 130, "N": 136, "K": 96, "offset": 3},
]
# bf16 output: one rounding is at most 2^-8 (0.39%) relative; fp32 accumulation of K products in any
# order (serial, tree, split-K) adds ~1e-6 of the row's scale. Elements near zero (cancellation over K
# terms) have a relative error that means nothing, so atol is 1e-2 of the output's rms: far below what a
# wrong product shows (a missing 32-wide k-tile moves an element by ~sqrt(32 / K) of the rms, 9% at
# K = 4096) yet above the rounding of any element up to 1.28 rms. Every element of a kernel that
# accumulates in fp32 and rounds once is therefore within rtol (|ref| > 1.28 rms) or atol, so min_matched
# is 1.0: one wrong edge row or column fails. Accumulating in bf16 (rounded every step) matches only
# 15-30% of the elements at K = 1000-4096 and fails; so do all-zero and copied outputs.
TOLERANCE = {"rtol": 8e-3, "atol": 1e-2, "min_matched": 1.0}
VENDOR_NAME = ("FlagGems flag_gems.ops.group_mm(a, b, offs) (Triton, called directly; bf16 in and out, fp32 "
               "accumulation, int32 offsets)")
VENDOR_FALLBACK = ("torch.compile(torch._grouped_mm(a, b, offs=offs), dynamic=False, options={'max_autotune': True, "
                   "'max_autotune_gemm_backends': 'TRITON'}) (Inductor's Triton grouped-GEMM template where this "
                   "torch has one; otherwise Inductor calls ATen's kernel, which the report must then say)")
# Start kernels, relative to the heldout/ folder.
STARTS = {"idiom": "kernels/gemm_grouped.cu"}

_WEIGHTS = (Fraction(5, 4), Fraction(3, 4), Fraction(17, 16), Fraction(15, 16))


def group_ends(shape):
    """The groups' cumulative row ends (offs) of a shape: M split by the repeating weights, emptied groups
    (key "empty": groups 0 and 2) weighing nothing, each end rounded down and the last one M."""
    g, m = shape["groups"], shape["M"]
    w = [_WEIGHTS[i % 4] for i in range(g)]
    if shape.get("empty"):
        for i in (0, 2):
            if i < g - 1:
                w[i] = Fraction(0)
    total, cum, ends = sum(w), Fraction(0), []
    for wi in w:
        cum += wi
        ends.append(int(m * cum / total))
    ends[-1] = m
    return ends


def make_inputs(shape, seed, device="cpu"):
    gen = torch.Generator(device=device).manual_seed(seed)
    g, m, n, k = shape["groups"], shape["M"], shape["N"], shape["K"]
    a = torch.randn(m, k, generator=gen, device=device, dtype=torch.float32)
    # b scaled by K^-1/2: outputs of unit scale whatever K is
    b = torch.randn(g, k, n, generator=gen, device=device, dtype=torch.float32).mul_(k ** -0.5)
    offs = torch.tensor(group_ends(shape), dtype=torch.int32, device=device)
    return {"a": a.to(torch.bfloat16), "b": b.to(torch.bfloat16), "offs": offs}


def outputs(shape):
    return {"out": ((shape["M"], shape["N"]), "bfloat16")}


def scalars(shape):
    return {"groups": shape["groups"], "M": shape["M"], "N": shape["N"], "K": shape["K"]}


def reference(inputs, shape):
    a, b = inputs["a"].double(), inputs["b"].double()
    out = torch.zeros(shape["M"], shape["N"], dtype=torch.float64, device=a.device)
    start = 0
    for g, end in enumerate(group_ends(shape)):
        out[start:end] = a[start:end] @ b[g]
        start = end
    return {"out": out}


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
    group_mm = _flag_gems("flag_gems.ops", "group_mm")
    out = group_mm(inputs["a"], inputs["b"], inputs["offs"])
    return {"out": _checked("flag_gems.ops.group_mm", out, (shape["M"], shape["N"]))}


_fallback = None  # compiled on the first vendor_fallback call


def _grouped_mm(a, b, offs):
    return torch._grouped_mm(a, b, offs=offs)


def vendor_fallback(inputs, shape):
    """The reference the issue allows when FlagGems fails: Inductor's output for torch._grouped_mm
    (VENDOR_FALLBACK)."""
    global _fallback
    if _fallback is None:
        _fallback = torch.compile(_grouped_mm, dynamic=False, fullgraph=True,
                                  options={"max_autotune": True, "max_autotune_gemm_backends": "TRITON"})
    return {"out": _fallback(inputs["a"], inputs["b"], inputs["offs"])}


def bytes_moved(shape):
    m, n, k = shape["M"], shape["N"], shape["K"]
    ends = group_ends(shape)
    used = sum(1 for s, e in zip([0] + ends[:-1], ends) if e > s)  # an empty group's weight need not be read
    return 2 * (m * k + used * k * n + m * n) + 4 * shape["groups"]


def flops(shape):
    return 2 * shape["M"] * shape["N"] * shape["K"]
