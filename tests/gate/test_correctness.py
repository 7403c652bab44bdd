"""The correctness rule and its negative controls, on the CPU."""
from pathlib import Path

import pytest
import torch

from klineage.gate.correctness import compare, negative_controls
from klineage.workload import Tolerance, load_workload

ROOT = Path(__file__).resolve().parents[2]
TOL = Tolerance(rtol=1e-3, atol=1e-3, min_matched=0.999)


def test_exact_passes_and_nan_fails():
    ref = torch.randn(1000, dtype=torch.float64)
    assert compare(ref.float(), ref, TOL).ok
    bad = ref.clone()
    bad[17] = float("nan")
    c = compare(bad, ref, TOL)
    assert not c.ok and c.nonfinite == 1 and "NaN" in c.reason


def test_atol_scales_with_magnitude():
    ref = torch.full((100,), 1e6, dtype=torch.float64)
    ref[0] = 0.0  # one element near zero: covered by atol * rms, not by rtol
    out = ref.clone()
    out[0] = 500.0  # 5e-4 of rms(ref) ~ 1e6
    assert compare(out, ref, TOL).ok
    out[0] = 5000.0
    c = compare(out, ref, Tolerance(1e-3, 1e-3, 1.0))
    assert not c.ok and c.first_bad_index == [0] and c.first_bad_value == 5000.0


def test_matched_fraction_threshold():
    ref = torch.randn(10000, dtype=torch.float64)
    out = ref.clone()
    out[:5] += 10.0  # 0.05% wrong: under the 0.1% allowance
    assert compare(out, ref, TOL).ok
    out[:20] += 10.0  # 0.2% wrong
    assert not compare(out, ref, TOL).ok


def test_matching_infinity_passes_only_with_same_sign():
    ref = torch.tensor([1.0, float("inf"), -float("inf")], dtype=torch.float64)
    assert compare(ref.clone(), ref, Tolerance(1e-3, 1e-3, 1.0)).ok
    flipped = torch.tensor([1.0, -float("inf"), -float("inf")])
    assert not compare(flipped, ref, Tolerance(1e-3, 1e-3, 1.0)).ok


def test_shape_mismatch():
    c = compare(torch.zeros(3), torch.zeros(4, dtype=torch.float64), TOL)
    assert not c.ok and "shape" in c.reason


@pytest.mark.parametrize("name", ["row_sum", "swiglu"])
def test_negative_controls_rejected_and_truth_accepted(name):
    wl = load_workload(ROOT / "expert_kernels" / name)
    for shape in [wl.probe_shapes[2], wl.probe_shapes[3]]:
        for seed in (1, 2, 3):
            inputs = wl.make_inputs(shape, seed)
            refs = wl.reference(inputs, shape)
            controls = negative_controls(wl, inputs, refs, shape)
            assert controls["zeros"]["rejected"], controls
            assert controls["copy_of_input"]["rejected"], controls
            # the vendor reference, in the workload's own dtype, must pass
            vend = wl.vendor(inputs, shape)
            for k in refs:
                assert compare(vend[k], refs[k], wl.tolerance).ok, (name, shape, seed)


def test_row_sum_tolerance_catches_half_precision_inputs():
    """Pitfall 10: bf16-rounded inputs or a half-precision accumulator must be rejected."""
    wl = load_workload(ROOT / "expert_kernels" / "row_sum")
    shape = {"rows": 64, "cols": 4096}
    x = wl.make_inputs(shape, 1)["x"]
    ref = wl.reference({"x": x}, shape)["out"]
    bf16_inputs = x.bfloat16().float().sum(dim=1)
    assert not compare(bf16_inputs, ref, wl.tolerance).ok
    half_accumulate = x.half().sum(dim=1, dtype=torch.float16)
    assert not compare(half_accumulate.float(), ref, wl.tolerance).ok
    honest = x.sum(dim=1)
    assert compare(honest, ref, wl.tolerance).ok
