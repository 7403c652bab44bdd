"""The held-out LayerNorm instances (heldout/layernorm_*/workload.py, issue 8): out = (x - mean) /
sqrt(var + eps) * weight + bias along each row, bf16 in and out, fp32 math, entry `layernorm`. An
instance sets NAME, BENCHMARK_CASES and PROBE_SHAPES, then `globals().update(define(globals()))` (see
heldout_ops/__init__.py for how the functions below become the instance's own).
"""
import torch
import torch.nn.functional as F

from heldout_ops import bind, flag_gems_ref, fresh

FAMILY = "reduction"
DTYPES = ("bfloat16",)
ENTRY = "layernorm"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "weight", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "bias", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
    {"name": "rows", "kind": "int"},
    {"name": "cols", "kind": "int"},
    {"name": "eps", "kind": "float"},
]
EPS = 1e-5  # torch's default
# bf16 output: one rounding is at most 2^-8 (0.39%) relative; rtol 8e-3 is twice that. fp32 statistics
# (two passes, Welford, or even E[x^2] - mean^2 at these rows' mean / spread of at most ~25) stay well
# inside it. Where weight * xhat cancels bias the relative error means nothing; atol is 1e-3 of the
# output's rms, above the fp32 error there (~1e-6) and far below a wrong statistic. (A kernel that
# rounds xhat to bf16 before the affine step fails where it cancels; FlagGems computes
# weight * (x - mean) * rstd + bias in fp32 and rounds once.) Every element of an fp32 kernel passes, so
# min_matched is 1.0 (one wrong row or column fails). Statistics accumulated serially in bf16, a
# variance without the mean removed, a missing bias, all-zero and copied outputs fail.
TOLERANCE = {"rtol": 8e-3, "atol": 1e-3, "min_matched": 1.0}
VENDOR_NAME = ("FlagGems flag_gems.ops.layer_norm(x, [cols], weight, bias, eps)[0] (Triton, called directly; bf16 "
               "in and out, fp32 math; the mean and rstd it also returns are not used)")
VENDOR_FALLBACK = ("torch.compile of F.layer_norm(x.float(), (cols,), weight.float(), bias.float(), eps).bfloat16(), "
                   "dynamic=False (one fused Triton reduction kernel)")
# Start kernels, relative to the heldout/ folder.
STARTS = {"idiom": "kernels/layernorm_idiom.cu", "naive": "kernels/layernorm_naive.cu"}


def define(ns: dict) -> dict:
    """Every name of a LayerNorm instance's workload besides its own, for the instance namespace `ns`."""
    return {
        "torch": torch, "F": F,
        **fresh(FAMILY=FAMILY, DTYPES=DTYPES, ENTRY=ENTRY, ARGS=ARGS, EPS=EPS, TOLERANCE=TOLERANCE,
                VENDOR_NAME=VENDOR_NAME, VENDOR_FALLBACK=VENDOR_FALLBACK, STARTS=STARTS),
        **flag_gems_ref.define(ns),
        "_fallback": None,  # compiled on the first vendor_fallback call
        **bind(ns, make_inputs, outputs, scalars, reference, vendor, _layer_norm, vendor_fallback, bytes_moved,
               flops),
    }


# ---- templates: run in the instance's namespace (its NAME and the names define() returns)


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    rows, cols = shape["rows"], shape["cols"]
    # each row with its own mean (N(0, 2^2)) and spread (e^-1 .. e^1): the mean matters and differs per row
    mean = torch.randn(rows, 1, generator=g, device=device).mul_(2.0)
    spread = torch.rand(rows, 1, generator=g, device=device).mul_(2.0).sub_(1.0).exp_()
    x = torch.randn(rows, cols, generator=g, device=device).mul_(spread).add_(mean)
    weight = torch.randn(cols, generator=g, device=device).mul_(0.5).add_(1.0)
    bias = torch.randn(cols, generator=g, device=device).mul_(0.5)
    return {"x": x.to(torch.bfloat16), "weight": weight.to(torch.bfloat16), "bias": bias.to(torch.bfloat16)}


def outputs(shape):
    return {"out": ((shape["rows"], shape["cols"]), "bfloat16")}


def scalars(shape):
    return {"rows": shape["rows"], "cols": shape["cols"], "eps": EPS}


def reference(inputs, shape):
    x = inputs["x"].double()
    centered = x - x.mean(dim=1, keepdim=True)
    xhat = centered * torch.rsqrt(centered.square().mean(dim=1, keepdim=True) + EPS)
    return {"out": xhat * inputs["weight"].double() + inputs["bias"].double()}


def vendor(inputs, shape):
    layer_norm = _flag_gems("flag_gems.ops", "layer_norm")
    res = layer_norm(inputs["x"], [shape["cols"]], inputs["weight"], inputs["bias"], EPS)
    out = res[0] if isinstance(res, (tuple, list)) else res  # (y, mean, rstd) in flag-gems 2.x-5.x
    return {"out": _checked("flag_gems.ops.layer_norm", out, (shape["rows"], shape["cols"]))}


def _layer_norm(x, weight, bias):
    return F.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(), EPS).to(torch.bfloat16)


def vendor_fallback(inputs, shape):
    """The reference the issue allows when FlagGems fails: torch.compile's Triton kernel (VENDOR_FALLBACK)."""
    global _fallback
    if _fallback is None:
        _fallback = torch.compile(_layer_norm, dynamic=False, fullgraph=True)
    return {"out": _fallback(inputs["x"], inputs["weight"], inputs["bias"])}


def bytes_moved(shape):
    # x read once and out written once (bf16), weight and bias read once
    return 2 * 2 * shape["rows"] * shape["cols"] + 2 * 2 * shape["cols"]


def flops(shape):
    # per element: add (mean), subtract, square, add (variance), multiply by rstd and weight, add bias
    return 7 * shape["rows"] * shape["cols"]
