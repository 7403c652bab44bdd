"""The held-out Softmax instances (heldout/softmax_*/workload.py, issue 8): out = softmax(x) along each
row, bf16 in and out, fp32 math, entry `softmax`; the inputs plant masked (-inf) and +-100-shifted rows.
An instance sets NAME, BENCHMARK_CASES and PROBE_SHAPES, then `globals().update(define(globals()))` (see
heldout_ops/__init__.py for how the functions below become the instance's own).
"""
import torch

from heldout_ops import bind, flag_gems_ref, fresh

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


def define(ns: dict) -> dict:
    """Every name of a Softmax instance's workload besides its own, for the instance namespace `ns`."""
    return {
        "torch": torch,
        **fresh(FAMILY=FAMILY, DTYPES=DTYPES, ENTRY=ENTRY, ARGS=ARGS, SHIFT=SHIFT, MASKED=MASKED,
                TOLERANCE=TOLERANCE, VENDOR_NAME=VENDOR_NAME, VENDOR_FALLBACK=VENDOR_FALLBACK, STARTS=STARTS),
        **flag_gems_ref.define(ns),
        "_fallback": None,  # compiled on the first vendor_fallback call
        **bind(ns, make_inputs, outputs, scalars, reference, vendor, _softmax, vendor_fallback, bytes_moved, flops),
    }


# ---- templates: run in the instance's namespace (its NAME and the names define() returns)


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


def vendor(inputs, shape):
    softmax = _flag_gems("flag_gems.ops", "softmax")
    return {"out": _checked("flag_gems.ops.softmax", softmax(inputs["x"], -1), (shape["rows"], shape["cols"]))}


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
