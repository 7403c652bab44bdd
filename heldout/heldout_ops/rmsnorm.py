"""The held-out RMSNorm instances (heldout/rmsnorm_*/workload.py, issue 8): out = x / sqrt(mean(x^2) + eps)
* weight along each row, bf16 in and out, fp32 math, entry `rmsnorm`. An instance sets NAME,
BENCHMARK_CASES and PROBE_SHAPES, then `globals().update(define(globals()))` (see
heldout_ops/__init__.py for how the functions below become the instance's own).
"""
import torch

from heldout_ops import bind, flag_gems_ref, fresh

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


def define(ns: dict) -> dict:
    """Every name of an RMSNorm instance's workload besides its own, for the instance namespace `ns`."""
    return {
        "torch": torch,
        **fresh(FAMILY=FAMILY, DTYPES=DTYPES, ENTRY=ENTRY, ARGS=ARGS, EPS=EPS, TOLERANCE=TOLERANCE,
                VENDOR_NAME=VENDOR_NAME, VENDOR_FALLBACK=VENDOR_FALLBACK, STARTS=STARTS),
        **flag_gems_ref.define(ns),
        "_fallback": None,  # compiled on the first vendor_fallback call
        **bind(ns, make_inputs, outputs, scalars, reference, vendor, _rms_norm, vendor_fallback, bytes_moved, flops),
    }


# ---- templates: run in the instance's namespace (its NAME and the names define() returns)


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


def vendor(inputs, shape):
    rms_norm = _flag_gems("flag_gems.ops", "rms_norm")
    out = rms_norm(inputs["x"], [shape["cols"]], inputs["weight"], EPS)
    return {"out": _checked("flag_gems.ops.rms_norm", out, (shape["rows"], shape["cols"]))}


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
