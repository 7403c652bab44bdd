"""The held-out grouped GEMM instances (heldout/grouped_mm_*/workload.py, issue 8): torch._grouped_mm(a, b,
offs) with a 2-D a (M x K, row-major), a 3-D b (G x K x N, each group's weight row-major) and offs the
groups' cumulative row ends (int32, on the device); bf16 in and out, fp32 accumulation, entry
`grouped_mm`. An instance sets NAME, BENCHMARK_CASES and PROBE_SHAPES, then
`globals().update(define(globals()))` (see heldout_ops/__init__.py for how the functions below become
the instance's own).
"""
from fractions import Fraction

import torch

from heldout_ops import bind, flag_gems_ref, fresh, gemm

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
VENDOR_NAME = ("FlagGems flag_gems.ops.group_mm(a, b, offs) (Triton, called directly; bf16 in and out, fp32 "
               "accumulation, int32 offsets)")
VENDOR_FALLBACK = ("torch.compile(torch._grouped_mm(a, b, offs=offs), dynamic=False, options={'max_autotune': True, "
                   "'max_autotune_gemm_backends': 'TRITON'}) (Inductor's Triton grouped-GEMM template where this "
                   "torch has one; otherwise Inductor calls ATen's kernel, which the report must then say)")
# Start kernels, relative to the heldout/ folder.
STARTS = {"idiom": "kernels/gemm_grouped.cu"}

_WEIGHTS = (Fraction(5, 4), Fraction(3, 4), Fraction(17, 16), Fraction(15, 16))


def define(ns: dict) -> dict:
    """Every name of a grouped GEMM instance's workload besides its own, for the instance namespace `ns`."""
    return {
        "Fraction": Fraction, "torch": torch,
        **fresh(FAMILY=gemm.FAMILY, DTYPES=DTYPES, ENTRY=ENTRY, ARGS=ARGS, TOLERANCE=gemm.TOLERANCE,
                VENDOR_NAME=VENDOR_NAME, VENDOR_FALLBACK=VENDOR_FALLBACK, STARTS=STARTS, _WEIGHTS=_WEIGHTS),
        **flag_gems_ref.define(ns),
        "_fallback": None,  # compiled on the first vendor_fallback call
        **bind(ns, group_ends, make_inputs, outputs, scalars, reference, vendor, _grouped_mm, vendor_fallback,
               bytes_moved, flops),
    }


# ---- templates: run in the instance's namespace (its NAME and the names define() returns)


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


def vendor(inputs, shape):
    group_mm = _flag_gems("flag_gems.ops", "group_mm")
    out = group_mm(inputs["a"], inputs["b"], inputs["offs"])
    return {"out": _checked("flag_gems.ops.group_mm", out, (shape["M"], shape["N"]))}


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
