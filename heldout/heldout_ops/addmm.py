"""The held-out addmm instance (heldout/addmm_*/workload.py, issue 8): out = bias + a @ b (torch.addmm, beta =
alpha = 1), bias N elements broadcast over the rows, a M x K and b K x N row-major, bf16 in and out, fp32
accumulation, entry `addmm`. An instance sets NAME, BENCHMARK_CASES and PROBE_SHAPES, then
`globals().update(define(globals()))` (see heldout_ops/__init__.py for how the functions below become
the instance's own).
"""
import torch

from heldout_ops import bind, flag_gems_ref, fresh, gemm

DTYPES = ("bfloat16",)
ENTRY = "addmm"
ARGS = [
    {"name": "bias", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "a", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "b", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
    {"name": "M", "kind": "int"},
    {"name": "N", "kind": "int"},
    {"name": "K", "kind": "int"},
]
# gemm.TOLERANCE; the bias is of the product's scale (N(0, 1)), added in fp32 before the output's one
# rounding: the same budget as the product alone. A missing bias moves every element by ~1 rms and fails.
TOLERANCE = gemm.TOLERANCE
VENDOR_NAME = ("FlagGems flag_gems.ops.addmm(bias, a, b) (Triton, called directly; beta = alpha = 1, bf16 in "
               "and out, fp32 accumulation)")
VENDOR_FALLBACK = ("torch.compile(torch.addmm(bias, a, b), dynamic=False, options={'max_autotune': True, "
                   "'max_autotune_gemm_backends': 'TRITON'}) (Inductor's autotuned Triton GEMM with the bias "
                   "in its epilogue)")


def define(ns: dict) -> dict:
    """Every name of an addmm instance's workload besides its own, for the instance namespace `ns`."""
    return {
        "torch": torch,
        **fresh(FAMILY=gemm.FAMILY, DTYPES=DTYPES, ENTRY=ENTRY, ARGS=ARGS, TOLERANCE=TOLERANCE,
                VENDOR_NAME=VENDOR_NAME, VENDOR_FALLBACK=VENDOR_FALLBACK, STARTS=gemm.STARTS_MM),
        **flag_gems_ref.define(ns),
        "_fallback": None,  # compiled on the first vendor_fallback call
        **bind(ns, make_inputs, outputs, scalars, reference, vendor, _addmm, vendor_fallback, bytes_moved, flops),
    }


# ---- templates: run in the instance's namespace (its NAME and the names define() returns)


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    m, n, k = shape["M"], shape["N"], shape["K"]
    a = torch.randn(m, k, generator=g, device=device, dtype=torch.float32)
    # b scaled by K^-1/2: a product of unit scale whatever K is, the bias of the same scale
    b = torch.randn(k, n, generator=g, device=device, dtype=torch.float32).mul_(k ** -0.5)
    bias = torch.randn(n, generator=g, device=device, dtype=torch.float32)
    return {"bias": bias.to(torch.bfloat16), "a": a.to(torch.bfloat16), "b": b.to(torch.bfloat16)}


def outputs(shape):
    return {"out": ((shape["M"], shape["N"]), "bfloat16")}


def scalars(shape):
    return {"M": shape["M"], "N": shape["N"], "K": shape["K"]}


def reference(inputs, shape):
    return {"out": inputs["bias"].double() + inputs["a"].double() @ inputs["b"].double()}


def vendor(inputs, shape):
    addmm = _flag_gems("flag_gems.ops", "addmm")
    out = addmm(inputs["bias"], inputs["a"], inputs["b"])
    return {"out": _checked("flag_gems.ops.addmm", out, (shape["M"], shape["N"]))}


def _addmm(bias, a, b):
    return torch.addmm(bias, a, b)


def vendor_fallback(inputs, shape):
    """The reference the issue allows when FlagGems fails: Inductor's Triton GEMM (VENDOR_FALLBACK)."""
    global _fallback
    if _fallback is None:
        _fallback = torch.compile(_addmm, dynamic=False, fullgraph=True,
                                  options={"max_autotune": True, "max_autotune_gemm_backends": "TRITON"})
    return {"out": _fallback(inputs["bias"], inputs["a"], inputs["b"])}


def bytes_moved(shape):
    m, n, k = shape["M"], shape["N"], shape["K"]
    return 2 * (n + m * k + k * n + m * n)  # bias, a and b read once, out written once, bf16


def flops(shape):
    m, n, k = shape["M"], shape["N"], shape["K"]
    return 2 * m * n * k + m * n
