"""The corpus's value probes (expert_kernels/*/stress.py) are well-posed: on each probe's input the
workload's own reference is finite and exact where the probe plants a known answer, and the probe
separates the two arithmetic forms it is written for (emulated here in fp32 torch; which kernels
actually fail is what the H200 probe records say)."""
from pathlib import Path

import pytest
import torch

from klineage.gate.correctness import compare
from klineage.lineage.probe import probe_set, value_probes
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]


def _stress(name):
    wl = load_workload(ROOT / "expert_kernels" / name)
    scope: dict = {}
    exec((ROOT / "expert_kernels" / name / "stress.py").read_text(), scope)
    return wl, scope["VALUE_PROBES"]


@pytest.mark.parametrize("name,probe", [("swiglu", "saturated_gates"), ("row_sum", "cancelling_pairs"),
                                        ("gdn", "hard_resets"), ("fmha", "null_sink"),
                                        ("cross_entropy", "confident_large")])
def test_each_value_probe_runs_at_the_largest_aligned_probe_shape(name, probe):
    wl, _ = _stress(name)
    assert value_probes(wl) == [probe]
    (p,) = [p for p in probe_set(wl) if p.kind == "value"]
    assert p.name.startswith(f"value:{probe}:") and "offset" not in p.shape


def test_saturated_gates_give_exact_zeros_and_separate_the_product_first_form():
    wl, probes = _stress("swiglu")
    shape = {"rows": 64, "cols": 4100}
    inputs = probes["saturated_gates"](wl.make_inputs(shape, 1), shape)
    ref = wl.reference(inputs, shape)["out"]
    planted = inputs["a"].view(-1)[::8]
    assert bool((planted == torch.finfo(torch.bfloat16).min).all())
    assert bool(torch.isfinite(ref).all()) and bool((ref.view(-1)[::8] == 0).all())
    a, b = inputs["a"].float(), inputs["b"].float()
    divide_first = (a / (1.0 + torch.exp(-a)) * b).to(torch.bfloat16)            # silu, then * b
    product_first = (a * b * torch.reciprocal(1.0 + torch.exp(-a))).to(torch.bfloat16)  # a * b * rcp(..)
    assert compare(divide_first, ref, wl.tolerance).ok
    bad = compare(product_first, ref, wl.tolerance)
    assert not bad.ok and bool(torch.isnan(product_first).any())


def test_cancelling_pairs_sum_to_exact_zero_and_separate_strided_lanes():
    wl, probes = _stress("row_sum")
    shape = {"rows": 30, "cols": 4099}
    inputs = probes["cancelling_pairs"](wl.make_inputs(shape, 1), shape)
    x = inputs["x"]
    ref = wl.reference(inputs, shape)["out"]
    assert bool((ref[::3] == 0).all()) and bool(torch.isfinite(ref).all())
    assert bool(torch.isfinite(x).all())
    serial = torch.zeros(x.shape[0])
    for c in range(x.shape[1]):             # one thread per row, column order, fp32
        serial += x[:, c]
    assert compare(serial, ref, wl.tolerance).ok
    lanes = torch.stack([x[:, j::32].sum(dim=1) for j in range(32)], dim=1)  # 32 strided partials
    strided = lanes.sum(dim=1)
    assert not compare(strided, ref, wl.tolerance).ok and bool(torch.isnan(strided[::3]).all())


def test_hard_resets_keep_the_recurrence_exact_and_break_cumulative_gate_differences():
    wl, probes = _stress("gdn")
    shape = {"B": 1, "T": 512, "H": 1, "HV": 3}
    inputs = probes["hard_resets"](wl.make_inputs(shape, 1), shape)
    assert bool(torch.isneginf(inputs["g"][:, 100::333]).all()) and bool((inputs["g"] <= 0).all())
    ref = wl.reference(inputs, shape)
    assert all(bool(torch.isfinite(t).all()) for t in ref.values())
    names = ("q", "k", "v", "g", "beta")
    o, s = wl.module.recurrence(*(inputs[n] for n in names), dtype=torch.float32)   # token by token
    assert compare(o.to(torch.bfloat16), ref["o"], wl.tolerance).ok and compare(s, ref["state"], wl.tolerance).ok
    o, s = wl.module.chunked(*(inputs[n] for n in names), dtype=torch.float32)      # G_i - G_j form
    assert not compare(o.to(torch.bfloat16), ref["o"], wl.tolerance).ok and bool(torch.isnan(s).any())


def test_null_sink_keeps_a_normal_range_output_carried_by_subnormal_fp16_weights():
    wl, probes = _stress("fmha")
    shape = {"B": 1, "H": 2, "S": 256, "D": 128}
    inputs = probes["null_sink"](wl.make_inputs(shape, 1), shape)
    ref = wl.reference(inputs, shape)["out"]      # float64 on the CPU
    assert bool(torch.isfinite(ref).all()) and ref.abs().max() < 65504
    q, k, v = (inputs[n].double() for n in ("q", "k", "v"))
    p = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
    assert float(p[..., 0].min()) > 0.999                       # the sink takes the weight
    rest = p[..., 1:]
    assert float(rest.max()) < 2.0 ** -14                       # every other weight is an fp16 subnormal
    fp32_p = (p.float() @ v.float()).double()
    assert compare(fp32_p.half(), ref, wl.tolerance).ok
    fp16_p = (p.half().float() @ v.float()).double()            # p rounded to fp16 before P.V
    assert not compare(fp16_p.half(), ref, wl.tolerance).ok


def test_large_magnitude_scales_only_the_inputs_a_stress_file_names(tmp_path, monkeypatch):
    from klineage.lineage.probe import large_magnitude_inputs, probe_workload
    monkeypatch.setenv("KLINEAGE_HOME", str(tmp_path))
    gdn, _ = _stress("gdn")
    assert large_magnitude_inputs(gdn) == ("v",)
    big = next(p for p in probe_set(gdn) if p.kind == "large_magnitude")
    small = {"B": 1, "T": 200, "H": 1, "HV": 3}
    gen = probe_workload(gdn, [big])
    plain, scaled = gdn.make_inputs(small, 1), gen.make_inputs({**small, **{k: v for k, v in big.shape.items()
                                                                           if k not in small}}, 1)
    assert torch.equal(scaled["v"], (plain["v"] * 1000.0).to(plain["v"].dtype))
    for name in ("q", "k", "g", "beta"):
        assert torch.equal(scaled[name], plain[name])
    # the value probe still goes through the workload's own table
    val = next(p for p in probe_set(gdn) if p.kind == "value")
    reset = gen.make_inputs({**small, **{k: v for k, v in val.shape.items() if k not in small}}, 1)
    assert bool(torch.isneginf(reset["g"][:, 100]).all()) and int(torch.isneginf(reset["g"]).sum()) == 3
    # a workload that names nothing keeps the generated text (and so its records) as it was
    rs = load_workload(ROOT / "expert_kernels" / "row_sum")
    assert large_magnitude_inputs(rs) is None
    text = Path(probe_workload(rs, probe_set(rs)).path).read_text()
    assert "LARGE_MAGNITUDE_INPUTS" not in text and "_kl_probe_make_inputs" not in text
