"""The held-out bmm instances (heldout/bmm_*/workload.py, issue 8): out[i] = a[i] @ b[i] (torch.bmm), a
batch x M x K and b batch x K x N, dense and row-major, bf16 in and out, fp32 accumulation, entry `bmm`.
An instance sets NAME, BENCHMARK_CASES and PROBE_SHAPES, then `globals().update(define(globals()))` (see
heldout_ops/__init__.py for how the functions below become the instance's own).
"""
import torch

from heldout_ops import bind, flag_gems_ref, fresh, gemm

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
VENDOR_NAME = "FlagGems flag_gems.ops.bmm(a, b) (Triton, called directly; bf16 in and out, fp32 accumulation)"
VENDOR_FALLBACK = ("torch.compile(torch.bmm(a, b), dynamic=False, options={'max_autotune': True, "
                   "'max_autotune_gemm_backends': 'TRITON'}) (Inductor's autotuned Triton batched GEMM)")


def define(ns: dict) -> dict:
    """Every name of a bmm instance's workload besides its own, for the instance namespace `ns`."""
    return {
        "torch": torch,
        **fresh(FAMILY=gemm.FAMILY, DTYPES=DTYPES, ENTRY=ENTRY, ARGS=ARGS, TOLERANCE=gemm.TOLERANCE,
                VENDOR_NAME=VENDOR_NAME, VENDOR_FALLBACK=VENDOR_FALLBACK, STARTS=gemm.STARTS_MM),
        **flag_gems_ref.define(ns),
        "_fallback": None,  # compiled on the first vendor_fallback call
        **bind(ns, make_inputs, outputs, scalars, reference, vendor, _bmm, vendor_fallback, bytes_moved, flops),
    }


# ---- templates: run in the instance's namespace (its NAME and the names define() returns)


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


def vendor(inputs, shape):
    bmm = _flag_gems("flag_gems.ops", "bmm")
    dims = (shape["batch"], shape["M"], shape["N"])
    return {"out": _checked("flag_gems.ops.bmm", bmm(inputs["a"], inputs["b"]), dims)}


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
