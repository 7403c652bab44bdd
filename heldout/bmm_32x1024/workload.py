"""bmm_32x1024: held-out GEMM instance (issue 8), out[i] = a[i] @ b[i] for 32 batches of
M = N = K = 1024 (torch.bmm); bf16 in and out, fp32 accumulation.

a is batch x M x K and b is batch x K x N, every matrix row-major and the batches dense: torch.bmm's
layout, which flag_gems.ops.bmm takes as it is. out is batch x M x N bf16. The oracle is the float64
batched product of the bf16 inputs; the performance reference is FlagGems' Triton bmm called directly.
No lineage of the library was mined from this instance. Start kernel: heldout/kernels/gemm_mm.cu
(entry `bmm`, shared by every mm, addmm and bmm instance).
"""
import torch

NAME = "bmm_32x1024"
FAMILY = "gemm"
DTYPES = ("bfloat16",)
ENTRY = "bmm"
ARGS = [
    {"name": "a", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "b", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
    {"name": "batch", "kind": "int"},
    {"name": "M", "kind": "int"},
    {"name": "N", "kind": "int"},
    {"name": "K", "kind": "int"},
]
BENCHMARK_CASES = [{"batch": 32, "M": 1024, "N": 1024, "K": 1024}]
# The mm probes' assumptions (edge tiles in M and N, a partial k-tile, K or N not a multiple of 8, odd N,
# misaligned bases), each with several batches so a wrong batch stride shows; with an odd K or N every
# batch's matrices start at another alignment; one batch of one element.
PROBE_SHAPES = [
    {"batch": 1, "M": 1, "N": 1, "K": 1},
    {"batch": 7, "M": 1, "N": 1, "K": 1},
    {"batch": 3, "M": 7, "N": 9, "K": 13},
    {"batch": 2, "M": 64, "N": 64, "K": 64},
    {"batch": 3, "M": 129, "N": 136, "K": 200},
    {"batch": 4, "M": 130, "N": 257, "K": 200},
    {"batch": 2, "M": 300, "N": 264, "K": 1000},
    {"batch": 5, "M": 65, "N": 72, "K": 1001},
    {"batch": 2, "M": 257, "N": 384, "K": 2048},
    {"batch": 3, "M": 520, "N": 1032, "K": 96},
    {"batch": 3, "M": 200, "N": 136, "K": 264, "offset": 8},
    {"batch": 2, "M": 100, "N": 304, "K": 512, "offset": 1},
    {"batch": 3, "M": 130, "N": 136, "K": 96, "offset": 3},
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
VENDOR_NAME = "FlagGems flag_gems.ops.bmm(a, b) (Triton, called directly; bf16 in and out, fp32 accumulation)"
VENDOR_FALLBACK = ("torch.compile(torch.bmm(a, b), dynamic=False, options={'max_autotune': True, "
                   "'max_autotune_gemm_backends': 'TRITON'}) (Inductor's autotuned Triton batched GEMM)")
# Start kernels, relative to the heldout/ folder.
STARTS = {"idiom": "kernels/gemm_mm.cu"}


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    bt, m, n, k = shape["batch"], shape["M"], shape["N"], shape["K"]
    a = torch.randn(bt, m, k, generator=g, device=device, dtype=torch.float32)
    # b scaled by K^-1/2: outputs of unit scale whatever K is
    b = torch.randn(bt, k, n, generator=g, device=device, dtype=torch.float32).mul_(k ** -0.5)
    return {"a": a.to(torch.bfloat16), "b": b.to(torch.bfloat16)}


def outputs(shape):
    return {"out": ((shape["batch"], shape["M"], shape["N"]), "bfloat16")}


def scalars(shape):
    return {"batch": shape["batch"], "M": shape["M"], "N": shape["N"], "K": shape["K"]}


def reference(inputs, shape):
    return {"out": torch.bmm(inputs["a"].double(), inputs["b"].double())}


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
    bmm = _flag_gems("flag_gems.ops", "bmm")
    dims = (shape["batch"], shape["M"], shape["N"])
    return {"out": _checked("flag_gems.ops.bmm", bmm(inputs["a"], inputs["b"]), dims)}


_fallback = None  # compiled on the first vendor_fallback call


def _bmm(a, b):
    return torch.bmm(a, b)


def vendor_fallback(inputs, shape):
    """The reference the issue allows when FlagGems fails: Inductor's Triton GEMM (VENDOR_FALLBACK)."""
    global _fallback
    if _fallback is None:
        _fallback = torch.compile(_bmm, dynamic=False, fullgraph=True,
                                  options={"max_autotune": True, "max_autotune_gemm_backends": "TRITON"})
    return {"out": _fallback(inputs["a"], inputs["b"])}


def bytes_moved(shape):
    bt, m, n, k = shape["batch"], shape["M"], shape["N"], shape["K"]
    return 2 * bt * (m * k + k * n + m * n)  # a and b read once, out written once, bf16


def flops(shape):
    return 2 * shape["batch"] * shape["M"] * shape["N"] * shape["K"]
