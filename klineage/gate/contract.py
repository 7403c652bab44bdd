"""A workload's contract run on a tiny shape on the CPU (`klineage workload check`), before any
kernel or GPU is involved: make_inputs, outputs, scalars, reference, vendor, bytes_moved and flops
each called once and their results checked against ARGS, the vendor compared with the reference
under the workload's tolerance. (The negative controls need real sizes: the gate runs them.)"""
from __future__ import annotations

import math

import torch

from klineage.gate.correctness import compare
from klineage.workload import ALIAS_KEY, OFFSET_KEY, Workload, shape_key

# an error naming one of these is the vendor needing a GPU, which a CPU check reports as skipped
_GPU_WORDS = ("cuda", "gpu", "triton", "nvidia", "device-side", "driver", "no viable backend")


def tiny_shape(wl: Workload) -> tuple[str, dict]:
    """(kind, shape): the workload's benchmark or probe shape with the fewest elements among those
    whose every size is at least 2 (a size of 1 hides a transposed or summed-over axis), else the
    smallest of all."""
    def dims(shape: dict) -> list[int]:
        return [v for k, v in shape.items() if k not in (OFFSET_KEY, ALIAS_KEY) and isinstance(v, int)]
    shapes = wl.all_shapes()
    pool = [ks for ks in shapes if all(v >= 2 for v in dims(ks[1]))] or shapes
    return min(pool, key=lambda ks: math.prod(dims(ks[1])))


def check_contract(wl: Workload, shape: dict | None = None, seed: int = 1) -> dict:
    """{"ok", "shape", "shape_text", "why_shape", "checks": [{"function", "result", "detail"}]}: result
    is "ok", "FAILED" or "skipped" (a vendor that needs a GPU); `ok` is False when any FAILED.
    Never raises for a broken workload function: its exception is that function's FAILED row."""
    why = "the given shape"
    if shape is None:
        kind, shape = tiny_shape(wl)
        why = f"the smallest {kind} shape with every size >= 2"
    checks: list[dict] = []

    def row(function: str, result: str, detail: str) -> None:
        checks.append({"function": function, "result": result, "detail": detail})

    def call(function: str, fn):
        try:
            return True, fn()
        except Exception as exc:  # a broken contract function is a result of the check
            return False, f"raised {type(exc).__name__}: {str(exc)[:300]}"

    ok, inputs = call("make_inputs", lambda: wl.make_inputs(shape, seed, device="cpu"))
    if not ok or not _inputs_ok(wl, inputs, row):
        if not ok:
            row("make_inputs", "FAILED", inputs)
        return _done(wl, shape, why, checks)
    ok, outs = call("outputs", lambda: wl.outputs(shape))
    if not ok:
        row("outputs", "FAILED", outs)
        return _done(wl, shape, why, checks)
    row("outputs", "ok", ", ".join(f"{n} {tuple(d)} {t}" for n, (d, t) in outs.items()))
    ok, sc = call("scalars", lambda: wl.scalars(shape))
    row("scalars", "ok" if ok else "FAILED", ", ".join(f"{k}={v}" for k, v in sc.items()) if ok else sc)
    before = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    ok, ref = call("reference", lambda: wl.reference(inputs, shape))
    if not ok:
        row("reference", "FAILED", ref)
        return _done(wl, shape, why, checks)
    ref_ok = _outputs_ok(wl, "reference", ref, outs, row)
    changed = [k for k, v in before.items() if not torch.equal(v, inputs[k])]
    if changed:
        row("reference", "FAILED", f"changed its inputs {', '.join(changed)} (the oracle must not write them)")
        ref_ok = False
    if not ref_ok:
        return _done(wl, shape, why, checks)
    ok, ven = call("vendor", lambda: wl.vendor({k: v.clone() if isinstance(v, torch.Tensor) else v
                                               for k, v in inputs.items()}, shape))
    if not ok:
        needs_gpu = any(w in ven.lower() for w in _GPU_WORDS)
        row("vendor", "skipped" if needs_gpu else "FAILED",
            (f"needs a GPU ({wl.vendor_name}): {ven}" if needs_gpu else ven))
    elif _outputs_ok(wl, "vendor", ven, outs, row, quiet=True):
        # outputs one side leaves out are not compared: a scratch buffer the kernel writes (partials,
        # a workspace) has no reference value, and a vendor may not produce one the oracle states
        both = [n for n in ref if n in ven]
        cmp = {n: compare(ven[n].to(torch.float64), ref[n], wl.tolerance) for n in both}
        bad = {n: c for n, c in cmp.items() if not c.ok}
        alone = sorted(set(ref) ^ set(ven))
        row("vendor", "FAILED" if bad or not both else "ok",
            ("; ".join(f"{n}: {c.reason}" for n, c in bad.items()) + " (vendor against reference)") if bad
            else "the vendor and the reference return no output in common: nothing to compare" if not both
            else f"{wl.vendor_name}: within tolerance of the reference"
            + (f" ({', '.join(alone)}: returned by one of them only, not compared)" if alone else ""))
    for fname in ("bytes_moved", "flops"):
        ok, v = call(fname, lambda f=fname: getattr(wl, f)(shape))
        row(fname, "ok" if ok else "FAILED", f"{v:,}" if ok else v)
    return _done(wl, shape, why, checks)


def _done(wl: Workload, shape: dict, why: str, checks: list[dict]) -> dict:
    return {"workload": wl.name, "shape": dict(shape), "shape_text": shape_key(shape), "why_shape": why,
            "ok": all(c["result"] != "FAILED" for c in checks), "checks": checks}


def _inputs_ok(wl: Workload, inputs, row) -> bool:
    if not isinstance(inputs, dict):
        row("make_inputs", "FAILED", f"must return a dict of tensors, got {type(inputs).__name__}")
        return False
    missing = [n for n in wl.input_names if n not in inputs]
    if missing:
        row("make_inputs", "FAILED", f"no tensor for the input argument(s) {', '.join(missing)} (ARGS)")
        return False
    bad = []
    for a in wl.pointer_args:
        t = inputs.get(a.name)
        if a.role in ("in", "inout") and (not isinstance(t, torch.Tensor) or t.dtype != getattr(torch, a.dtype)):
            bad.append(f"{a.name}: {getattr(t, 'dtype', type(t).__name__)}, ARGS says {a.dtype}")
    if bad:
        row("make_inputs", "FAILED", "; ".join(bad))
        return False
    row("make_inputs", "ok", ", ".join(f"{n} {tuple(inputs[n].shape)} {str(inputs[n].dtype).removeprefix('torch.')}"
                                      for n in wl.input_names))
    return True


def _outputs_ok(wl: Workload, function: str, got, outs: dict, row, quiet: bool = False) -> bool:
    """The result of reference or vendor is a non-empty dict of outputs (those it leaves out are the
    workload's check()'s), each a tensor of the declared shape."""
    if not isinstance(got, dict) or not got:
        row(function, "FAILED", f"must return a dict of output tensors, got {got!r:.80}")
        return False
    problems = [f"{name} is not an output argument (ARGS: {', '.join(outs)})" for name in got if name not in outs]
    for name, (dims, _dtype) in outs.items():
        t = got.get(name)
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            problems.append(f"{name} is a {type(t).__name__}, not a tensor")
        elif tuple(t.shape) != tuple(dims):
            problems.append(f"{name} has shape {tuple(t.shape)}, outputs() says {tuple(dims)}")
    if problems:
        row(function, "FAILED", "; ".join(problems))
        return False
    if not quiet:
        nonfinite = {n: int((~torch.isfinite(got[n].to(torch.float64))).sum()) for n in got}
        row(function, "ok", ", ".join(f"{n} {tuple(got[n].shape)}" + (f" ({k} non-finite)" if k else "")
                                      for n, k in nonfinite.items()))
    return True
