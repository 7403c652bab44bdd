"""The correctness rule at its edges, on small tensors (fast: the mutation run of klineage.gate.correctness
runs these on every mutant; benchmarks/mutation.py)."""
import dataclasses
import math
from pathlib import Path

import pytest
import torch

from klineage.gate.correctness import Comparison, compare, compare_outputs, negative_controls
from klineage.workload import Tolerance, load_workload

ROOT = Path(__file__).resolve().parents[2]
F64 = torch.float64


def t(*xs) -> torch.Tensor:
    return torch.tensor(xs, dtype=F64)


def test_zeros_fail_against_a_reference_of_tiny_magnitude():
    """The absolute term scales with the reference's rms, never with a floor of 1: all-zero outputs
    against a reference of rms 1e-6 are wrong (under a floor of 1 they would pass an atol of 1e-3)."""
    ref = torch.full((64,), 1e-6, dtype=F64)
    c = compare(torch.zeros(64), ref, Tolerance(1e-3, 1e-3, 0.99))
    assert not c.ok and c.matched_fraction == 0.0 and c.mismatches == 64
    assert c.ref_rms == pytest.approx(1e-6)
    assert compare(ref * (1 + 5e-4), ref, Tolerance(1e-3, 0.0, 1.0)).ok


def test_an_all_zero_reference_is_judged_on_a_scale_of_one():
    ref = torch.zeros(8, dtype=F64)
    assert compare(torch.full((8,), 0.25), ref, Tolerance(0.0, 0.5, 1.0)).ok
    assert compare(torch.full((8,), 0.5), ref, Tolerance(0.0, 0.5, 1.0)).ok  # at the bound: passes
    c = compare(torch.full((8,), 0.75), ref, Tolerance(0.0, 0.5, 1.0))
    assert not c.ok and c.ref_rms == 0.0


def test_relative_and_absolute_bounds_are_inclusive():
    ref = t(1.0, 2.0, 4.0, 8.0)
    tol = Tolerance(0.5, 0.0, 1.0)
    assert compare(ref * 1.5, ref, tol).ok  # |err| == rtol * |ref| everywhere
    assert not compare(ref * 1.5 + t(0, 0, 0, 1e-9), ref, tol).ok
    ref = t(2.0, -2.0, 2.0, -2.0)  # rms 2
    tol = Tolerance(0.0, 0.25, 1.0)
    assert compare(ref + 0.5, ref, tol).ok  # |err| == atol * rms(ref)
    assert not compare(ref + 0.5 * (1 + 1e-9), ref, tol).ok
    # either term suffices: a large element within rtol, a small one within atol
    ref = t(1000.0, 0.0)
    assert compare(t(1000.5, 0.5), ref, Tolerance(1e-3, 1e-3, 1.0)).ok
    assert not compare(t(1002.0, 0.5), ref, Tolerance(1e-3, 1e-6, 1.0)).ok


def test_the_matched_fraction_bound_is_inclusive_and_counted():
    ref = torch.arange(1, 11, dtype=F64)
    out = ref.clone()
    out[:2] += 100.0
    c = compare(out, ref, Tolerance(1e-6, 1e-6, 0.8))
    assert c.ok and c.matched_fraction == 0.8 and c.mismatches == 2 and c.elements == 10
    c = compare(out, ref, Tolerance(1e-6, 1e-6, 0.81))
    assert not c.ok and "0.800000 of elements within tolerance, need 0.81" in c.reason
    assert "max abs err 100" in c.reason and f"rms of reference {c.ref_rms:.3g}" in c.reason


def test_the_error_figures_and_the_first_bad_element():
    ref = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=F64)
    out = ref.clone()
    out[1, 1] = 5.5
    out[1, 2] = 9.0
    c = compare(out.float(), ref, Tolerance(1e-3, 1e-3, 1.0))
    assert not c.ok and c.first_bad_index == [1, 1] and c.first_bad_value == 5.5 and c.first_bad_expected == 5.0
    assert c.max_abs_err == 3.0 and c.max_rel_err == 0.5 and c.nonfinite == 0
    assert c.ref_rms == pytest.approx(math.sqrt(sum(x * x for x in range(1, 7)) / 6), rel=1e-12)
    good = compare(ref, ref, Tolerance(1e-3, 1e-3, 1.0))
    assert good.ok and good.first_bad_index is None and good.reason == "" and good.max_abs_err == 0.0
    scalar = compare(torch.tensor(2.0), torch.tensor(1.0, dtype=F64), Tolerance(1e-3, 1e-3, 1.0))
    assert not scalar.ok and scalar.first_bad_index == [0]


def test_the_relative_error_of_an_element_whose_reference_is_zero_is_finite():
    c = compare(t(1.0, 5e-4), t(1.0, 0.0), Tolerance(1e-3, 1e-3, 1.0))
    assert c.ok and math.isfinite(c.max_rel_err)
    assert c.max_rel_err == pytest.approx(5e-4 / (1e-30 * math.sqrt(0.5)))  # against 1e-30 of the rms


def test_nan_never_passes_and_infinity_only_where_the_reference_has_it():
    tol = Tolerance(1.0, 1.0, 0.5)  # loose enough that only the non-finite rule can fail these
    c = compare(t(1.0, float("nan"), 1.0, 1.0), t(1.0, 1.0, 1.0, 1.0), tol)
    assert not c.ok and c.nonfinite == 1 and c.mismatches == 1 and c.matched_fraction == 0.75
    assert c.max_abs_err == math.inf and c.max_rel_err == math.inf
    assert "1 of 4 elements NaN/Inf" in c.reason
    assert not compare(t(float("inf"), 1.0), t(1.0, 1.0), tol).ok
    assert not compare(t(float("nan"), 1.0), t(float("nan"), 1.0), tol).ok  # NaN in the reference too
    same = compare(t(float("inf"), -float("inf"), 2.0), t(float("inf"), -float("inf"), 2.0), Tolerance(0.0, 0.0, 1.0))
    assert same.ok and same.nonfinite == 0 and same.max_abs_err == 0.0 and same.max_rel_err == 0.0
    # an infinite error (a finite output where the reference is infinite) is left out of the figures
    c = compare(t(5.0, 2.0), t(float("inf"), 2.0), Tolerance(1e-3, 1e-3, 0.5))
    assert c.nonfinite == 0 and c.max_abs_err == 0.0 and c.max_rel_err == 0.0
    flipped = compare(t(-float("inf"), 2.0), t(float("inf"), 2.0), tol)
    assert not flipped.ok and flipped.nonfinite == 1


def test_the_rms_is_of_the_finite_reference_values():
    ref = t(float("inf"), 3.0, 4.0)
    c = compare(t(float("inf"), 3.0, 4.0), ref, Tolerance(0.0, 0.0, 1.0))
    assert c.ok and c.ref_rms == pytest.approx(math.sqrt((9 + 16) / 3), rel=1e-12)
    assert compare(t(float("inf"), 3.0 + 0.09 * c.ref_rms, 4.0), ref, Tolerance(0.0, 0.1, 1.0)).ok
    assert not compare(t(float("inf"), 3.0 + 0.11 * c.ref_rms, 4.0), ref, Tolerance(0.0, 0.1, 1.0)).ok
    nothing_finite = compare(t(float("inf")), t(float("inf")), Tolerance(0.0, 0.0, 1.0))
    assert nothing_finite.ok and nothing_finite.ref_rms == 0.0


def test_empty_and_mismatched_shapes():
    c = compare(torch.zeros(0), torch.zeros(0, dtype=F64), Tolerance(0.0, 0.0, 1.0))
    assert c.ok and c.elements == 0 and c.matched_fraction == 1.0
    c = compare(torch.zeros(2, 3), torch.zeros(3, 2, dtype=F64), Tolerance(1.0, 1.0, 0.0))
    assert not c.ok and c.reason == "shape (2, 3) differs from reference (3, 2)" and c.mismatches == 6
    assert c.elements == 6 and c.matched_fraction == 0.0 and c.max_abs_err == math.inf


def test_outputs_are_compared_by_name_and_records_are_plain():
    refs = {"a": t(1.0), "b": t(2.0)}
    got = compare_outputs({"a": t(1.0), "b": t(3.0), "extra": t(0.0)}, refs, Tolerance(1e-3, 1e-3, 1.0))
    assert list(got) == ["a", "b"] and got["a"].ok and not got["b"].ok
    d = got["b"].to_dict()
    assert d["ok"] is False and d["elements"] == 1 and d["first_bad_value"] == 3.0 and isinstance(got["b"], Comparison)


def test_negative_controls_on_a_small_shape():
    wl = load_workload(ROOT / "expert_kernels" / "row_sum")
    shape = {"rows": 8, "cols": 64}
    inputs = wl.make_inputs(shape, 1)
    refs = wl.reference(inputs, shape)
    controls = negative_controls(wl, inputs, refs, shape)
    assert set(controls) == {"zeros", "copy_of_input"}
    assert controls["zeros"]["rejected"] and controls["copy_of_input"]["rejected"]
    assert controls["zeros"]["reason"] == "out: matched 0.0000"
    # a control that matches is reported: the reference itself as the input copy, under a loose tolerance
    same = {"x": refs["out"].repeat(2)}
    loose = dataclasses.replace(wl, tolerance=Tolerance(1e-3, 1e-3, 1.0))
    c = negative_controls(loose, same, refs, shape)
    assert not c["copy_of_input"]["rejected"] and c["copy_of_input"]["reason"] == "out: matched 1.0000"
    assert c["zeros"]["rejected"]
    # an input shorter than the output is padded with zeros, which do not match
    short = {"x": refs["out"][:3]}
    c = negative_controls(loose, short, refs, shape)
    assert c["copy_of_input"]["rejected"] and c["copy_of_input"]["reason"] == "out: matched 0.3750"


def test_the_early_answers_hold_every_figure():
    inf = math.inf
    c = compare(torch.zeros(2, 3), torch.zeros(3, 2, dtype=F64), Tolerance(1.0, 1.0, 0.0))
    assert c.to_dict() == {"ok": False, "elements": 6, "matched_fraction": 0.0, "mismatches": 6, "nonfinite": 0,
                           "max_abs_err": inf, "max_rel_err": inf, "ref_rms": 0.0, "first_bad_index": None,
                           "first_bad_value": None, "first_bad_expected": None,
                           "reason": "shape (2, 3) differs from reference (3, 2)"}
    c = compare(torch.zeros(0), torch.zeros(0, dtype=F64), Tolerance(0.0, 0.0, 1.0))
    assert c.to_dict() == {"ok": True, "elements": 0, "matched_fraction": 1.0, "mismatches": 0, "nonfinite": 0,
                           "max_abs_err": 0.0, "max_rel_err": 0.0, "ref_rms": 0.0, "first_bad_index": None,
                           "first_bad_value": None, "first_bad_expected": None, "reason": ""}


def test_the_rule_computes_in_double_precision_whatever_the_dtypes():
    """A float32 reference of magnitude 1e20 squares past float32's range: in float64 its rms is 1e20
    and all-zero outputs fail; computed in float32 the rms would be infinite and anything would pass."""
    ref = torch.full((4,), 1e20, dtype=torch.float32)
    c = compare(torch.zeros(4), ref, Tolerance(1e-3, 1e-3, 0.5))
    assert not c.ok and c.ref_rms == pytest.approx(1e20, rel=1e-6)
    assert compare(ref.clone(), ref, Tolerance(1e-3, 1e-3, 1.0)).ok


def test_a_control_is_rejected_only_when_every_output_rejects_it():
    """Two outputs: the zeros control matches the first (its reference is zeros) and not the second."""
    from types import SimpleNamespace
    wl = SimpleNamespace(input_names=("x",), tolerance=Tolerance(1e-3, 1e-3, 1.0),
                         outputs=lambda shape: {"a": ((2,), "float32"), "b": ((2,), "float32")})
    refs = {"a": torch.zeros(2, dtype=F64), "b": torch.ones(2, dtype=F64)}
    c = negative_controls(wl, {"x": t(7.0, 8.0)}, refs, {})
    assert not c["zeros"]["rejected"] and c["zeros"]["reason"] == "a: matched 1.0000; b: matched 0.0000"
    assert c["copy_of_input"]["rejected"] and c["copy_of_input"]["reason"] == "a: matched 0.0000; b: matched 0.0000"
