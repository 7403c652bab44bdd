"""Code the row-wise apply workloads share (apply_workloads/<op>_<style>/): sums over one dimension,
softmax, log-softmax, LayerNorm and RMSNorm, each over the innermost dimension or a strided one,
written by their naive kernels in the styles public code and benchmark problems use.

A workload.py states what is its own (NAME, ENTRY, ARGS in its kernel's names and order, the
benchmark and probe shapes) and the computation in four names, then takes the rest of the contract:

    OP = "rmsnorm"               sum | softmax | log_softmax | layernorm | rmsnorm
    DIMS = ("batch", "channels", "spatial")   the input's dimensions, as shape keys
    REDUCE = 1                   the dimension reduced (normalised over)
    ROLES = {"x": "input", "weight": "weight", "out": "output"}   role -> ARGS name
    globals().update(define(globals()))

Roles: x (the input), out (the result), weight and bias (along the reduced dimension), mean and rstd
(LayerNorm's per-row statistics, as llm.c's forward writes them). Every int argument is the shape key
of its name; every float argument is EPS (default 1e-5). The input's dtype is its ARGS entry's;
statistics are fp32. FAMILY is "reduction", as the held-out instances of these operators have it. The oracle computes in float64; the performance reference is torch eager in the
workload's dtypes.
"""
import math

import torch

# flops per input element (sum: an add; softmax: max, subtract, exp, add, divide; log-softmax: max,
# subtract, exp, add, subtract; LayerNorm: two adds for the statistics, a subtract and square, then
# subtract, multiply, multiply, add; RMSNorm: square, add, two multiplies)
_FLOPS = {"sum": 1, "softmax": 5, "log_softmax": 5, "layernorm": 8, "rmsnorm": 4}
_TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# fp32 results: every kernel's order of additions (serial, strided, a tree) errs by about 1e-6 of the
# row's magnitude; rtol 1e-4 leaves two decades and a bf16 (2^-8) or fp16 (2^-11) shortcut fails. A sum
# can cancel, so the absolute term (1e-4 of the output's rms) covers elements near zero. A 16-bit
# output rounds once: 2^-11 (fp16) or 2^-8 (bf16) relative, which the rtol admits with the fp32 math
# before it; a statistic over the wrong count or another row's values fails at these widths.
TOLERANCES = {"float32": {"rtol": 1e-4, "atol": 1e-4, "min_matched": 0.999},
              "float16": {"rtol": 2e-3, "atol": 1e-3, "min_matched": 0.999},
              "bfloat16": {"rtol": 8e-3, "atol": 2e-3, "min_matched": 0.999}}


def define(ns: dict) -> dict:
    """The contract names the workload module `ns` does not set itself, from its OP, DIMS, REDUCE,
    ROLES and ARGS (see the module docstring)."""
    op, dims, red, roles, args = ns["OP"], tuple(ns["DIMS"]), ns["REDUCE"], ns["ROLES"], ns["ARGS"]
    eps = ns.get("EPS", 1e-5)
    by_name = {a["name"]: a for a in args}
    dtype = by_name[roles["x"]]["dtype"]
    tdt = _TORCH[dtype]
    kept = tuple(d for i, d in enumerate(dims) if i != red)

    def extent(shape, keys):
        return tuple(shape[k] for k in keys)

    def along(t, shape):
        """A vector along the reduced dimension, shaped to broadcast against the input."""
        view = [1] * len(dims)
        view[red] = shape[dims[red]]
        return t.view(view)

    def make_inputs(shape, seed, device="cpu"):
        g = torch.Generator(device=device).manual_seed(seed)
        full = extent(shape, dims)
        # each row (line) at its own scale, e^-2 .. e^2: another row's statistics give wrong values
        scale_shape = [s if i != red else 1 for i, s in enumerate(full)]
        scale = torch.rand(scale_shape, generator=g, device=device).mul_(4.0).sub_(2.0).exp_()
        x = torch.randn(full, generator=g, device=device).mul_(scale)
        out = {roles["x"]: x.to(tdt)}
        n = shape[dims[red]]
        if "weight" in roles:
            out[roles["weight"]] = torch.randn(n, generator=g, device=device).mul_(0.5).add_(1.0).to(tdt)
        if "bias" in roles:
            out[roles["bias"]] = torch.randn(n, generator=g, device=device).mul_(0.5).to(tdt)
        return out

    def outputs(shape):
        res = {roles["out"]: (extent(shape, kept if op == "sum" else dims), dtype)}
        for stat in ("mean", "rstd"):
            if stat in roles:
                res[roles[stat]] = (extent(shape, kept), "float32")
        return res

    def scalars(shape):
        return {a["name"]: (shape[a["name"]] if a["kind"] in ("int", "int64") else eps)
                for a in args if a["kind"] != "ptr"}

    def compute(inputs, shape, dt):
        x = inputs[roles["x"]].to(dt)
        w = along(inputs[roles["weight"]].to(dt), shape) if "weight" in roles else None
        b = along(inputs[roles["bias"]].to(dt), shape) if "bias" in roles else None
        res = {}
        if op == "sum":
            res[roles["out"]] = x.sum(dim=red)
        elif op == "softmax":
            res[roles["out"]] = torch.softmax(x, dim=red)
        elif op == "log_softmax":
            res[roles["out"]] = torch.log_softmax(x, dim=red)
        elif op == "layernorm":
            var, mean = torch.var_mean(x, dim=red, keepdim=True, correction=0)
            rstd = torch.rsqrt(var + eps)
            res[roles["out"]] = (x - mean) * rstd * w + b
            if "mean" in roles:
                res[roles["mean"]] = mean.squeeze(red)
                res[roles["rstd"]] = rstd.squeeze(red)
        else:
            res[roles["out"]] = x * torch.rsqrt(x.square().mean(dim=red, keepdim=True) + eps) * (w if w is not None else 1)
        return res

    def reference(inputs, shape):
        return compute(inputs, shape, torch.float64)

    def vendor(inputs, shape):
        x = inputs[roles["x"]]
        last = red == len(dims) - 1
        n = shape[dims[red]]
        if op == "layernorm" and last:
            out, mean, rstd = torch.ops.aten.native_layer_norm(x, [n], inputs[roles["weight"]], inputs[roles["bias"]], eps)
            res = {roles["out"]: out}
            if "mean" in roles:
                res[roles["mean"]], res[roles["rstd"]] = mean.squeeze(-1).float(), rstd.squeeze(-1).float()
            return res
        if op == "rmsnorm" and last:
            return {roles["out"]: torch.nn.functional.rms_norm(x, [n], inputs.get(roles.get("weight")), eps)}
        res = compute(inputs, shape, tdt)
        return {k: (v.float() if k in (roles.get("mean"), roles.get("rstd")) else v) for k, v in res.items()}

    def bytes_moved(shape):
        e = _BYTES[dtype]
        full, n = math.prod(extent(shape, dims)), shape[dims[red]]
        rows = math.prod(extent(shape, kept))
        out = rows if op == "sum" else full
        params = n * sum(1 for r in ("weight", "bias") if r in roles)
        stats = 4 * rows * sum(1 for r in ("mean", "rstd") if r in roles)
        return e * (full + out + params) + stats

    def flops(shape):
        return _FLOPS[op] * math.prod(extent(shape, dims))

    what = {"sum": "x.sum(dim)", "softmax": "torch.softmax(x, dim)", "log_softmax": "torch.log_softmax(x, dim)",
            "layernorm": "torch.ops.aten.native_layer_norm" if red == len(dims) - 1 else "var_mean, rsqrt",
            "rmsnorm": "torch.nn.functional.rms_norm" if red == len(dims) - 1 else "x * rsqrt(mean(x^2)) * w"}[op]
    return {
        "FAMILY": ns.get("FAMILY", "reduction"), "DTYPES": (dtype,), "EPS": eps,
        "TOLERANCE": ns.get("TOLERANCE", dict(TOLERANCES[dtype])),
        "VENDOR_NAME": ns.get("VENDOR_NAME", f"torch eager {what} over dim {red} ({dtype})"),
        "make_inputs": make_inputs, "outputs": outputs, "scalars": scalars, "reference": reference,
        "vendor": vendor, "bytes_moved": bytes_moved, "flops": flops,
    }
