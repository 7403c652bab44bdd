"""The row-wise apply workloads (apply_workloads/<op>_<style>/ built on apply_workloads/rowops): each
loads under the contract; its float64 oracle is the operator (checked against torch's own on small
shapes); the PyTorch reference passes the tolerance while all-zero and copied outputs, a 16-bit
shortcut of an fp32 result and another row's (or the wrong dimension's) statistics fail it; the naive
kernels keep the entry point's ABI, pass the static guard, carry no detected mechanism but the math
calls and qualifiers their authors chose (rsqrtf, __expf, __restrict__), and on the
CPU (emulate_block: host C++ under the sanitizers) match the oracle on every probe shape."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from klineage.gate.correctness import compare, negative_controls
from klineage.gate.guard import check_source
from klineage.workload import Tolerance, load_workload

ROOT = Path(__file__).resolve().parents[1]
APPLY = ROOT / "apply_workloads"
sys.path.insert(0, str(ROOT / "tests" / "mechanisms"))
import emulate_block  # noqa: E402

NAMES = sorted(p.parent.name for p in APPLY.glob("*/workload.py")
               if "from rowops import define" in p.read_text())


@pytest.fixture(scope="module", params=NAMES)
def wl(request):
    return load_workload(APPLY / request.param)


def _small(wl) -> list[dict]:
    return [s for s in wl.probe_shapes if math.prod(v for k, v in s.items() if k != "offset") <= 200_000][:4]


def test_every_operator_has_three_styles_or_more():
    ops = {}
    for n in NAMES:
        m = load_workload(APPLY / n).module
        key = "softmax" if m.OP in ("softmax", "log_softmax") else m.OP
        ops.setdefault(key, []).append(n)
    assert set(ops) == {"sum", "softmax", "layernorm", "rmsnorm"}
    assert all(len(v) >= 3 for v in ops.values()), ops
    strided = [n for n in NAMES if load_workload(APPLY / n).module.REDUCE != len(load_workload(APPLY / n).module.DIMS) - 1]
    assert {"sum_dim1_strided", "sum_columns", "rmsnorm_channels"} <= set(strided)


def test_the_contract(wl):
    m = wl.module
    assert wl.family == "reduction" and wl.entry == m.ENTRY
    ints = {a.name for a in wl.args if a.kind in ("int", "int64")}
    for s in wl.benchmark_cases + wl.probe_shapes:
        assert ints <= set(s) and set(m.DIMS) <= set(s)
    assert set(m.outputs(wl.benchmark_cases[0])) == {a.name for a in wl.args if a.role == "out"}


def _torch_op(m, x, inputs, shape):
    red, eps = m.REDUCE, m.EPS
    x = x.double()
    if m.OP == "sum":
        return x.sum(red)
    if m.OP == "softmax":
        return torch.nn.functional.softmax(x, red)
    if m.OP == "log_softmax":
        return torch.nn.functional.log_softmax(x, red)
    view = [1] * x.dim()
    view[red] = -1
    w = inputs[m.ROLES["weight"]].double().view(view)
    if m.OP == "layernorm":
        xm = x.movedim(red, -1)
        out = torch.nn.functional.layer_norm(xm, (xm.shape[-1],), eps=eps).movedim(-1, red)
        return out * w + inputs[m.ROLES["bias"]].double().view(view)
    xm = x.movedim(red, -1)
    return torch.nn.functional.rms_norm(xm, (xm.shape[-1],), eps=eps).movedim(-1, red) * w


def test_the_oracle_is_the_operator(wl):
    m = wl.module
    for s in _small(wl):
        inputs = wl.make_inputs(s, 3)
        ref = wl.reference(inputs, s)[m.ROLES["out"]]
        want = _torch_op(m, inputs[m.ROLES["x"]], inputs, s)
        assert torch.allclose(ref, want, rtol=1e-9, atol=1e-9), s


def test_vendor_passes_and_controls_fail(wl):
    m = wl.module
    for s in _small(wl)[1:]:
        inputs = wl.make_inputs(s, 1)
        refs = wl.reference(inputs, s)
        vend = wl.vendor(inputs, s)
        assert set(vend) == set(refs)
        for k in refs:
            c = compare(vend[k], refs[k], wl.tolerance)
            assert c.ok, (s, k, c.reason)
        controls = negative_controls(wl, inputs, refs, s)
        assert controls["zeros"]["rejected"] and controls["copy_of_input"]["rejected"], (s, controls)
        out = refs[m.ROLES["out"]]
        if m.DTYPES == ("float32",) and out.numel() > 16:
            assert not compare(out.to(torch.bfloat16), out, wl.tolerance).ok, s  # a bf16 shortcut fails


def test_statistics_of_the_whole_tensor_fail(wl):
    """Each row is at its own scale: one statistic over the whole tensor in place of each row's fails."""
    m = wl.module
    if m.OP == "sum":
        pytest.skip("a sum has no statistics")
    s = next(s for s in _small(wl) if math.prod(s[d] for i, d in enumerate(m.DIMS) if i != m.REDUCE) > 2
             and s[m.DIMS[m.REDUCE]] > 8)
    inputs = wl.make_inputs(s, 5)
    ref = wl.reference(inputs, s)[m.ROLES["out"]]
    x, eps = inputs[m.ROLES["x"]].double(), m.EPS
    view = [1] * x.dim()
    view[m.REDUCE] = -1
    w = inputs[m.ROLES["weight"]].double().view(view) if "weight" in m.ROLES else 1.0
    if m.OP == "softmax":
        wrong = (x - x.max()).exp() / (x - x.max()).exp().sum()
    elif m.OP == "log_softmax":
        wrong = x - torch.logsumexp(x.flatten(), 0)
    elif m.OP == "layernorm":
        wrong = (x - x.mean()) / torch.sqrt(x.var(correction=0) + eps) * w + inputs[m.ROLES["bias"]].double().view(view)
    else:
        wrong = x * torch.rsqrt(x.square().mean() + eps) * w
    assert not compare(wrong, ref, wl.tolerance).ok


def test_the_naive_kernel_keeps_the_abi_and_is_plain(wl):
    from klineage.mechanisms import detect_all
    src = (APPLY / wl.path.parent.name / "naive.cu").read_text() if wl.path.is_file() else \
        (wl.path / "naive.cu").read_text()
    assert f'extern "C" cudaError_t {wl.entry}(' in src and "cudaStream_t stream" in src
    res = check_source(src, wl)
    assert res.ok, res.summary
    # rsqrtf / __expf and __restrict__ are their authors' habits, not optimizations added to the plain form
    assert {f.mechanism for f in detect_all(src)} <= {"fast_math", "restrict"}
    from klineage.mechanisms.shapes import shape_mechanisms
    assert shape_mechanisms(src, wl) == set()


@pytest.mark.skipif(emulate_block.GXX is None, reason="g++ is needed for the CPU emulation")
def test_the_naive_kernel_matches_the_oracle_on_every_probe_shape(wl):
    d = wl.path.parent if wl.path.is_file() else wl.path
    exe = emulate_block.build((d / "naive.cu").read_text(), wl)
    strict = Tolerance(wl.tolerance.rtol, wl.tolerance.atol, 1.0)
    for s in wl.probe_shapes:
        inputs, outs = emulate_block.run(exe, wl, s)
        for k, r in wl.reference(inputs, s).items():
            c = compare(outs[k], r, strict)
            assert c.ok, (s, k, c.reason)
