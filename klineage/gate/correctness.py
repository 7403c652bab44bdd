"""The correctness rule, pure torch so it runs (and is tested) on the CPU.

Rule, per output tensor, against the oracle computed in float64:
  an element passes when |out - ref| <= rtol * |ref|  or  |out - ref| <= atol * rms(ref),
  where rms(ref) is the root-mean-square of the finite reference values (1 if that is 0), so the
  absolute term scales with the output's magnitude instead of being a fixed number that all-zero
  outputs slip under. A NaN never passes; an infinity passes only where the reference holds the
  same infinity. The output passes when at least `min_matched` of its elements pass and it holds
  no NaN or unmatched infinity.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from klineage.workload import Tolerance, Workload


@dataclass
class Comparison:
    ok: bool
    elements: int
    matched_fraction: float
    mismatches: int
    nonfinite: int
    max_abs_err: float
    max_rel_err: float
    ref_rms: float
    first_bad_index: list[int] | None = None
    first_bad_value: float | None = None
    first_bad_expected: float | None = None
    reason: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> Comparison:
    """Apply the rule above to one output; never raises for wrong values, only for wrong shapes."""
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(False, out.numel(), 0.0, out.numel(), 0, float("inf"), float("inf"), 0.0,
                          reason=f"shape {tuple(out.shape)} differs from reference {tuple(ref.shape)}")
    o = out.detach().to(torch.float64).flatten()
    r = ref.detach().to(ref.device).to(torch.float64).flatten().to(o.device)
    n = o.numel()
    if n == 0:
        return Comparison(True, 0, 1.0, 0, 0, 0.0, 0.0, 0.0)
    finite_r = torch.isfinite(r)
    rms = float(torch.sqrt(torch.mean(torch.where(finite_r, r, 0.0) ** 2))) if bool(finite_r.any()) else 0.0
    scale = rms if rms > 0 else 1.0
    same_inf = torch.isinf(o) & torch.isinf(r) & (torch.sign(o) == torch.sign(r))
    nonfinite_bad = (~torch.isfinite(o)) & ~same_inf
    err = torch.where(same_inf, 0.0, (o - r).abs())
    err = torch.where(nonfinite_bad, float("inf"), err)
    ok_el = (err <= tol.rtol * r.abs()) | (err <= tol.atol * scale)
    ok_el &= ~nonfinite_bad
    matched = int(ok_el.sum())
    bad = n - matched
    nonfinite = int(nonfinite_bad.sum())
    finite_err = torch.where(torch.isfinite(err), err, 0.0)
    max_abs = float(finite_err.max()) if nonfinite == 0 else float("inf")
    rel = finite_err / r.abs().clamp_min(1e-30 * scale)
    max_rel = float(torch.where(finite_r, rel, 0.0).max()) if nonfinite == 0 else float("inf")
    frac = matched / n
    res = Comparison(frac >= tol.min_matched and nonfinite == 0, n, frac, bad, nonfinite, max_abs,
                     max_rel, rms)
    if bad:
        idx = int(torch.nonzero(~ok_el)[0])
        res.first_bad_index = list(torch.unravel_index(torch.tensor(idx), tuple(out.shape))) if out.dim() else [0]
        res.first_bad_index = [int(i) for i in res.first_bad_index]
        res.first_bad_value = float(o[idx])
        res.first_bad_expected = float(r[idx])
    if not res.ok:
        if nonfinite:
            res.reason = f"{nonfinite} of {n} elements NaN/Inf (unwritten outputs stay NaN)"
        else:
            res.reason = (f"{frac:.6f} of elements within tolerance, need {tol.min_matched}; "
                          f"max abs err {max_abs:.3g} (rms of reference {rms:.3g})")
    return res


def compare_outputs(outs: dict, refs: dict, tol: Tolerance) -> dict[str, Comparison]:
    return {name: compare(outs[name], refs[name], tol) for name in refs}


def negative_controls(workload: Workload, inputs: dict, refs: dict, shape: dict) -> dict[str, dict]:
    """Outputs that must fail the rule: all zeros, and a copy of the first input's leading values
    in the output's shape. Returns control name -> {"rejected": bool, "reason": str}; a control
    that passes means the workload's tolerance is too loose."""
    first_in = inputs[workload.input_names[0]].flatten()
    results: dict[str, dict] = {}
    for control in ("zeros", "copy_of_input"):
        rejected_all = True
        reasons = []
        for name, ref in refs.items():
            dims, dtype = workload.outputs(shape)[name]
            if control == "zeros":
                fake = torch.zeros(dims, dtype=torch.float64, device=ref.device)
            else:
                n = ref.numel()
                vals = first_in[:n].to(torch.float64)
                if vals.numel() < n:
                    vals = torch.cat([vals, vals.new_zeros(n - vals.numel())])
                fake = vals.reshape(dims).to(ref.device)
            c = compare(fake, ref, workload.tolerance)
            rejected_all &= not c.ok
            reasons.append(f"{name}: matched {c.matched_fraction:.4f}")
        results[control] = {"rejected": rejected_all, "reason": "; ".join(reasons)}
    return results
