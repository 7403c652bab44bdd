"""The held-out mm instances (heldout/mm_*/workload.py, issue 8): out = a @ b (torch.mm), a M x K and b K x
N row-major, bf16 in and out, fp32 accumulation, entry `mm`. An instance sets NAME, BENCHMARK_CASES and
PROBE_SHAPES, then `globals().update(define(globals()))` (see heldout_ops/__init__.py for how the
functions below become the instance's own).
"""
import torch

from heldout_ops import bind, flag_gems_ref, fresh, gemm

DTYPES = ("bfloat16",)
ENTRY = "mm"
ARGS = [
    {"name": "a", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "b", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
    {"name": "M", "kind": "int"},
    {"name": "N", "kind": "int"},
    {"name": "K", "kind": "int"},
]
VENDOR_NAME = "FlagGems flag_gems.ops.mm(a, b) (Triton, called directly; bf16 in and out, fp32 accumulation)"
VENDOR_FALLBACK = ("torch.compile(torch.mm(a, b), dynamic=False, options={'max_autotune': True, "
                   "'max_autotune_gemm_backends': 'TRITON'}) (Inductor's autotuned Triton GEMM)")


def define(ns: dict) -> dict:
    """Every name of an mm instance's workload besides its own, for the instance namespace `ns`."""
    return {
        "torch": torch,
        **fresh(FAMILY=gemm.FAMILY, DTYPES=DTYPES, ENTRY=ENTRY, ARGS=ARGS, TOLERANCE=gemm.TOLERANCE,
                VENDOR_NAME=VENDOR_NAME, VENDOR_FALLBACK=VENDOR_FALLBACK, STARTS=gemm.STARTS_MM),
        **flag_gems_ref.define(ns),
        "_fallback": None,  # compiled on the first vendor_fallback call
        **bind(ns, make_inputs, outputs, scalars, reference, vendor, _mm, vendor_fallback, bytes_moved, flops),
    }


# ---- templates: run in the instance's namespace (its NAME and the names define() returns)


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    m, n, k = shape["M"], shape["N"], shape["K"]
    a = torch.randn(m, k, generator=g, device=device, dtype=torch.float32)
    # b scaled by K^-1/2: outputs of unit scale whatever K is
    b = torch.randn(k, n, generator=g, device=device, dtype=torch.float32).mul_(k ** -0.5)
    return {"a": a.to(torch.bfloat16), "b": b.to(torch.bfloat16)}


def outputs(shape):
    return {"out": ((shape["M"], shape["N"]), "bfloat16")}


def scalars(shape):
    return {"M": shape["M"], "N": shape["N"], "K": shape["K"]}


def reference(inputs, shape):
    return {"out": inputs["a"].double() @ inputs["b"].double()}


def vendor(inputs, shape):
    mm = _flag_gems("flag_gems.ops", "mm")
    return {"out": _checked("flag_gems.ops.mm", mm(inputs["a"], inputs["b"]), (shape["M"], shape["N"]))}


def _mm(a, b):
    return torch.mm(a, b)


def vendor_fallback(inputs, shape):
    """The reference the issue allows when FlagGems fails: Inductor's Triton GEMM (VENDOR_FALLBACK)."""
    global _fallback
    if _fallback is None:
        _fallback = torch.compile(_mm, dynamic=False, fullgraph=True,
                                  options={"max_autotune": True, "max_autotune_gemm_backends": "TRITON"})
    return {"out": _fallback(inputs["a"], inputs["b"])}


def bytes_moved(shape):
    m, n, k = shape["M"], shape["N"], shape["K"]
    return 2 * (m * k + k * n + m * n)  # a and b read once, out written once, bf16


def flops(shape):
    return 2 * shape["M"] * shape["N"] * shape["K"]
