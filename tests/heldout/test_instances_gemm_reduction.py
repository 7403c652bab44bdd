"""The held-out instances of the GEMM and reduction families (issue 8): heldout/<instance>/workload.py and
their start kernels in heldout/kernels/.

Checked here without a GPU: every instance loads under the workload contract, names its start kernels
(which exist, export its entry point and pass the static guard) and its one benchmark case matches its
name; inputs, outputs and scalars agree with ARGS on every probe shape; the float64 oracle matches an
independent numpy computation on small shapes; the tolerance passes fp32 kernels (also with the extra
roundings FlagGems makes) and rejects precision shortcuts, wrong formulas, one wrong row and the
negative controls; the grouped split and the stress tables say what they claim; vendor() names the
missing flag-gems instead of falling back, and the fallbacks' formulas match the oracle. With nvcc,
every kernel file compiles for sm_90a (at the default without spills, at non-default legal points,
and at every point the sweep would try, where an illegal one fails with its static_assert). With a
GPU (`requires_cuda`), every start kernel runs on every shape against the oracle, writes nothing
outside its outputs and leaves its inputs alone.
"""
from __future__ import annotations

import math
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from klineage.apply.materialize import sweep_points, tunables
from klineage.gate.correctness import compare, negative_controls
from klineage.gate.guard import check_source
from klineage.tuning import ROLES
from klineage.workload import load_workload
from klineage.workload_schema import DTYPE_C, MAX_OFFSET

ROOT = Path(__file__).resolve().parents[2]
HELDOUT = ROOT / "heldout"
KERNELS = HELDOUT / "kernels"

GEMM = ("mm_2048", "mm_4096", "mm_8192", "addmm_4096", "bmm_16x2048", "bmm_32x1024", "grouped_mm_g4",
        "grouped_mm_g8")
REDUCTION = ("rmsnorm_16384x4096", "rmsnorm_8192x8192", "rmsnorm_32768x2048", "layernorm_16384x4096",
             "layernorm_8192x8192", "softmax_16384x4096", "softmax_131072x1024", "add_rmsnorm_16384x4096")
NAMES = GEMM + REDUCTION
ENTRY = {"mm": "mm", "addmm": "addmm", "bmm": "bmm", "grouped": "grouped_mm", "rmsnorm": "rmsnorm",
         "layernorm": "layernorm", "softmax": "softmax", "add": "add_rmsnorm"}
KERNEL_FILES = ("gemm_mm.cu", "gemm_grouped.cu", "rmsnorm_idiom.cu", "rmsnorm_naive.cu", "layernorm_idiom.cu",
                "layernorm_naive.cu", "softmax_idiom.cu", "softmax_naive.cu", "add_rmsnorm_idiom.cu",
                "add_rmsnorm_naive.cu")
TORCH = {"bfloat16": torch.bfloat16, "int32": torch.int32, "float32": torch.float32}


def _load(name):
    return load_workload(HELDOUT / name)


def _op(name: str) -> str:
    return name.split("_")[0]


def _expected_case(name: str) -> dict:
    """The benchmark case an instance's name promises."""
    if m := re.fullmatch(r"(?:add)?mm_(\d+)", name):
        n = int(m.group(1))
        return {"M": n, "N": n, "K": n}
    if m := re.fullmatch(r"bmm_(\d+)x(\d+)", name):
        n = int(m.group(2))
        return {"batch": int(m.group(1)), "M": n, "N": n, "K": n}
    if m := re.fullmatch(r"grouped_mm_g(\d+)", name):
        g = int(m.group(1))
        return {"groups": g, "M": 1024 * g, "N": 4096, "K": 4096}
    m = re.fullmatch(r"\w+?_(\d+)x(\d+)", name)
    return {"rows": int(m.group(1)), "cols": int(m.group(2))}


def _numel(shape: dict) -> int:
    return math.prod(v for k, v in shape.items() if k not in ("offset", "alias", "empty", "groups"))


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16)


def _ok(wl, out: dict, ref: dict) -> bool:
    return all(compare(out[k], ref[k], wl.tolerance).ok for k in ref)


@pytest.fixture(scope="module", params=NAMES)
def wl(request):
    return _load(request.param)


# ---------------------------------------------------------------- files and the contract


def test_every_instance_has_a_folder_and_its_start_kernels():
    for name in NAMES:
        assert (HELDOUT / name / "workload.py").is_file(), name
    for f in KERNEL_FILES:
        assert (KERNELS / f).is_file(), f


def test_instance_contract(wl):
    name = wl.path.parent.name
    assert wl.name == name and not wl.stateful
    assert wl.family == ("gemm" if name in GEMM else "reduction")
    assert wl.entry == ENTRY[_op(name)]
    assert "bfloat16" in wl.dtypes and set(wl.dtypes) <= set(DTYPE_C)
    assert [dict(c) for c in wl.benchmark_cases] == [_expected_case(name)]
    assert "FlagGems" in wl.vendor_name and "flag_gems." in wl.vendor_name
    mod = wl.module
    assert isinstance(mod.VENDOR_FALLBACK, str) and "torch" in mod.VENDOR_FALLBACK and callable(mod.vendor_fallback)
    assert wl.tolerance.min_matched == 1.0
    starts = mod.STARTS
    assert set(starts) == ({"idiom"} if name in GEMM else {"idiom", "naive"})
    for kind, rel in starts.items():
        src = (HELDOUT / rel).read_text()
        assert re.search(rf'extern "C" cudaError_t {wl.entry}\(', src), (name, rel)
        guard = check_source(src, wl)
        assert guard.ok, (name, rel, guard.summary)
        tun = tunables(src)
        assert tun, f"{rel}: no tunable constants"
        if kind == "idiom":  # the sweep's roles: a block size, and for the reductions a per-thread factor
            assert any(ROLES["block"].search(n) for n in tun), rel
            if name in REDUCTION:
                assert any(ROLES["factor"].search(n) for n in tun), rel


def test_instances_of_an_op_share_their_kernel_files():
    by_op: dict[str, set] = {}
    for name in NAMES:
        by_op.setdefault(_op(name), set()).add(tuple(sorted(_load(name).module.STARTS.items())))
    assert all(len(v) == 1 for v in by_op.values()), by_op
    assert _load("mm_2048").module.STARTS == _load("addmm_4096").module.STARTS == _load("bmm_32x1024").module.STARTS


def test_probe_shapes_stress_the_kernels(wl):
    probes = [dict(s) for s in wl.probe_shapes]
    offsets = {s.get("offset", 0) for s in probes}
    assert {1, 3, 8} <= offsets and max(offsets) <= MAX_OFFSET  # misaligned, and 16-byte but not 256-byte
    assert min(_numel(s) for s in probes) <= 3  # a tiny size
    if wl.family == "gemm":
        assert any(s["K"] % 8 for s in probes) and any(s["N"] % 2 for s in probes)  # no 16-byte rows; odd N
        assert any(s["M"] % 64 and s["N"] % 8 == 0 and s["K"] % 8 == 0 and s["K"] % 64 for s in probes)
        assert all(_numel(s) <= 2 * 2048 ** 3 for s in probes)  # quick to check against float64
    else:
        cols = {s["cols"] for s in probes}
        assert any(c % 2 for c in cols) and any(c > 8192 for c in cols) and {1000, 1032, 4104} <= cols
        assert all(_numel(s) <= 300_000 for s in probes)
    if wl.name.startswith("add_rmsnorm"):
        assert sum(1 for s in probes if s.get("alias")) >= 2  # FlagGems' op works in place


def test_inputs_outputs_scalars_agree_with_args(wl):
    ptr = {a.name: a for a in wl.args if a.kind == "ptr"}
    for shape in wl.probe_shapes:
        inputs = wl.make_inputs(shape, 3)
        assert set(inputs) == set(wl.input_names)
        for k, t in inputs.items():
            assert t.dtype == TORCH[ptr[k].dtype] and t.is_contiguous(), (k, shape)
        outs = wl.outputs(shape)
        assert set(outs) == set(wl.output_names)
        for k, (dims, dtype) in outs.items():
            assert dtype == ptr[k].dtype and all(d > 0 for d in dims)
        sc = wl.scalars(shape)
        for a in wl.args:
            if a.kind == "int":
                assert isinstance(sc[a.name], int) and 0 < sc[a.name] < 2**31
            elif a.kind == "float":
                assert isinstance(sc[a.name], float) and 0 < sc[a.name] < 1e-3
        assert wl.bytes_moved(shape) > 0 and wl.flops(shape) > 0


def test_inputs_depend_on_the_seed_only(wl):
    shape = min(wl.probe_shapes, key=lambda s: abs(_numel(s) - 5000))
    a, b, c = wl.make_inputs(shape, 1), wl.make_inputs(shape, 1), wl.make_inputs(shape, 2)
    for k in a:
        assert torch.equal(a[k], b[k])
        if a[k].is_floating_point():
            assert not torch.equal(a[k], c[k])


def test_bytes_and_flops_of_the_benchmark_case(wl):
    s = wl.benchmark_cases[0]
    if wl.family == "gemm":
        m, n, k = s["M"], s["N"], s["K"]
        bt = s.get("batch", 1)
        assert wl.flops(s) >= 2 * bt * m * n * k
        weights = s.get("groups", bt)
        assert wl.bytes_moved(s) >= 2 * (bt * m * k + weights * k * n + bt * m * n)
        assert wl.flops(s) / wl.bytes_moved(s) > 50  # compute-bound: the gate's FLOP floor applies
    else:
        elems = s["rows"] * s["cols"]
        arrays = 4 if wl.name.startswith("add_rmsnorm") else 2
        assert arrays * 2 * elems <= wl.bytes_moved(s) <= arrays * 2 * elems + 4 * s["cols"]


# ---------------------------------------------------------------- the oracle against numpy


def _np(t):
    return t.double().numpy()


def _numpy_reference(name: str, inputs: dict, shape: dict) -> dict:
    op = _op(name)
    if op == "mm":
        return {"out": np.einsum("mk,kn->mn", _np(inputs["a"]), _np(inputs["b"]))}
    if op == "addmm":
        return {"out": _np(inputs["bias"])[None, :] + np.einsum("mk,kn->mn", _np(inputs["a"]), _np(inputs["b"]))}
    if op == "bmm":
        return {"out": np.einsum("bmk,bkn->bmn", _np(inputs["a"]), _np(inputs["b"]))}
    if op == "grouped":
        a, b, ends = _np(inputs["a"]), _np(inputs["b"]), inputs["offs"].tolist()
        out = np.zeros((shape["M"], shape["N"]))
        for g, (s, e) in enumerate(zip([0] + ends[:-1], ends)):
            for r in range(s, e):
                out[r] = a[r] @ b[g]
        return {"out": out}
    x = _np(inputs["x"])
    if op == "softmax":
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return {"out": e / e.sum(axis=1, keepdims=True)}
    eps = _load(name).module.EPS
    if op == "layernorm":
        mu = x.mean(axis=1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
        return {"out": (x - mu) / np.sqrt(var + eps) * _np(inputs["weight"]) + _np(inputs["bias"])}
    if op == "add":
        x = x + _np(inputs["residual"])
    out = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * _np(inputs["weight"])
    return {"out": out, "residual_out": x} if op == "add" else {"out": out}


def _small_shapes(wl, n=3, limit=2_000_000):
    shapes = sorted((dict(s) for s in wl.probe_shapes if _numel(s) <= limit and not s.get("alias")), key=_numel)
    return [shapes[0], shapes[len(shapes) // 2], shapes[-1]][:n]


def test_reference_matches_numpy(wl):
    for shape in _small_shapes(wl):
        inputs = wl.make_inputs(shape, 5)
        ref = wl.reference(inputs, shape)
        want = _numpy_reference(wl.name, inputs, shape)
        assert set(ref) == set(want) == set(wl.output_names)
        for k in want:
            got = ref[k]
            dims = wl.outputs(shape)[k][0]
            assert got.dtype == torch.float64 and tuple(got.shape) == tuple(dims)
            np.testing.assert_allclose(got.numpy(), want[k], rtol=1e-9, atol=1e-9, err_msg=f"{wl.name} {shape} {k}")


# ---------------------------------------------------------------- what the tolerance lets through


def _gemm_fp32(inputs, name, k_cut=None, bf16_steps=False):
    """An emulated GEMM kernel's output: fp32 (or bf16-rounded-every-step) accumulation, one rounding."""
    op = _op(name)
    a, b = inputs["a"].float(), inputs["b"].float()
    if op == "grouped":
        ends = inputs["offs"].tolist()
        out = torch.zeros(a.shape[0], b.shape[-1])
        for g, (s, e) in enumerate(zip([0] + ends[:-1], ends)):
            out[s:e] = a[s:e] @ b[g]
        return {"out": _bf16(out)}
    if k_cut is not None:
        a, b = a[..., :k_cut], b[..., :k_cut, :]
    if bf16_steps:
        acc = torch.zeros(*a.shape[:-1], b.shape[-1]).bfloat16()
        for k in range(a.shape[-1]):
            acc = (acc.float() + a[..., k:k + 1] * b[..., k:k + 1, :]).bfloat16()
        out = acc.float()
    else:
        out = a @ b
    if op == "addmm":
        out = out + inputs["bias"].float()
    return {"out": _bf16(out)}


@pytest.mark.parametrize("name", GEMM)
def test_gemm_tolerance_separates(name):
    wl = _load(name)
    shape = {"bmm": {"batch": 2, "M": 48, "N": 40, "K": 1000},
             "grouped": {"groups": 4, "M": 100, "N": 40, "K": 1000}}.get(_op(name), {"M": 48, "N": 40, "K": 1000})
    inputs = wl.make_inputs(shape, 11)
    ref = wl.reference(inputs, shape)
    assert _ok(wl, _gemm_fp32(inputs, name), ref)
    controls = negative_controls(wl, inputs, ref, shape)
    assert all(c["rejected"] for c in controls.values()), controls
    one_row = _gemm_fp32(inputs, name)["out"].clone()
    one_row[..., -1, :] += 0.1  # one wrong edge row, 0.1 of the rms
    assert not _ok(wl, {"out": one_row}, ref)
    if _op(name) != "grouped":
        assert not _ok(wl, _gemm_fp32(inputs, name, bf16_steps=True), ref)  # bf16 accumulation
        assert not _ok(wl, _gemm_fp32(inputs, name, k_cut=1000 - 32), ref)  # a k-tile lost
    if _op(name) == "addmm":
        no_bias = {"out": _bf16(inputs["a"].float() @ inputs["b"].float())}
        assert not _ok(wl, no_bias, ref)
    if _op(name) == "bmm":
        same_b = {"out": _bf16(inputs["a"].float() @ inputs["b"].float()[0])}
        assert not _ok(wl, same_b, ref)
    if _op(name) == "grouped":
        ends = inputs["offs"].tolist()
        assert len(set(ends)) == len(ends)  # no empty group here: every weight counts
        wrong = _gemm_fp32(inputs, name)["out"].clone()
        wrong[ends[0]] = _bf16(inputs["a"].float()[ends[0]] @ inputs["b"].float()[0])  # a tile straddling groups
        assert not _ok(wl, {"out": wrong}, ref)


def _reduction_emulated(name, inputs, *, flag_gems_order=False, bf16_sum=False, count_off=0, no_max=False,
                        mask_as_zero=False, one_pass_var=False, no_center=False, no_bias=False, no_add=False,
                        from_fp32_sum=False):
    """An emulated reduction kernel's outputs: fp32 math and one bf16 rounding, or one of the variants
    the flags name."""
    op = _op(name)
    x = inputs["x"].float()
    cols = x.shape[1] + count_off
    if op == "softmax":
        if mask_as_zero:
            x = torch.nan_to_num(x, neginf=0.0)
        e = torch.exp(x) if no_max else torch.exp(x - x.max(dim=1, keepdim=True).values)
        if bf16_sum:
            s = torch.zeros(x.shape[0]).bfloat16()
            for c in range(x.shape[1]):
                s = (s.float() + e[:, c]).bfloat16()
            return {"out": _bf16(e / s.float()[:, None])}
        return {"out": _bf16(e / e.sum(dim=1, keepdim=True))}
    eps = _load(name).module.EPS
    if op == "layernorm":
        if bf16_sum:  # both statistics accumulated serially in bf16
            s = torch.zeros(x.shape[0]).bfloat16()
            for c in range(x.shape[1]):
                s = (s.float() + x[:, c]).bfloat16()
            mean = s.float()[:, None] / cols
            q = torch.zeros(x.shape[0]).bfloat16()
            for c in range(x.shape[1]):
                q = (q.float() + (x[:, c] - mean[:, 0]) ** 2).bfloat16()
            xhat = (x - mean) * torch.rsqrt(q.float()[:, None] / cols + eps)
            return {"out": _bf16(xhat * inputs["weight"].float() + inputs["bias"].float())}
        mean = x.sum(dim=1, keepdim=True) / cols
        if one_pass_var:
            var = (x * x).sum(dim=1, keepdim=True) / cols - mean * mean
        elif no_center:
            var = (x * x).sum(dim=1, keepdim=True) / cols
        else:
            var = ((x - mean) ** 2).sum(dim=1, keepdim=True) / cols
        bias = 0.0 if no_bias else inputs["bias"].float()
        if flag_gems_order:  # weight * (x - mean) * rstd + bias, in fp32 (one rounding)
            return {"out": _bf16(inputs["weight"].float() * (x - mean) * torch.rsqrt(var + eps) + bias)}
        return {"out": _bf16((x - mean) * torch.rsqrt(var + eps) * inputs["weight"].float() + bias)}
    outs = {}
    if op == "add":
        h = x if no_add else x + inputs["residual"].float()
        outs["residual_out"] = _bf16(h)
        x = h if from_fp32_sum else outs["residual_out"].float()
    if bf16_sum:
        ss = torch.zeros(x.shape[0]).bfloat16()
        for c in range(x.shape[1]):
            ss = (ss.float() + x[:, c] * x[:, c]).bfloat16()
        ss = ss.float()[:, None]
    else:
        ss = (x * x).sum(dim=1, keepdim=True)
    normed = x * torch.rsqrt(ss / cols + eps)
    if flag_gems_order:
        normed = _bf16(normed).float()
    outs["out"] = _bf16(normed * inputs["weight"].float())
    return outs


@pytest.mark.parametrize("name", REDUCTION)
def test_reduction_tolerance_separates(name):
    wl = _load(name)
    op = _op(name)
    for shape in ({"rows": 64, "cols": 1000}, {"rows": 16, "cols": 7}, {"rows": 8, "cols": 4104}):
        inputs = wl.make_inputs(shape, 13)
        ref = wl.reference(inputs, shape)
        assert _ok(wl, _reduction_emulated(name, inputs), ref), shape
        controls = negative_controls(wl, inputs, ref, shape)
        assert all(c["rejected"] for c in controls.values()), (shape, controls)
        one_row = _reduction_emulated(name, inputs)
        one_row["out"][-1] = _bf16(one_row["out"][-1].float() * 1.05)  # one row 5% off
        assert not _ok(wl, one_row, ref)
        if op != "softmax":
            assert _ok(wl, _reduction_emulated(name, inputs, flag_gems_order=True), ref), shape
        if shape["cols"] == 7:  # a mean over a vector's worth of columns instead of the row's
            assert not _ok(wl, _reduction_emulated(name, inputs, count_off=1), ref) or op == "softmax"
        if shape["cols"] == 1000:
            assert not _ok(wl, _reduction_emulated(name, inputs, bf16_sum=True), ref)
    inputs = wl.make_inputs({"rows": 64, "cols": 1000}, 17)
    ref = wl.reference(inputs, {"rows": 64, "cols": 1000})
    if op == "softmax":
        assert not _ok(wl, _reduction_emulated(name, inputs, no_max=True), ref)
        assert not _ok(wl, _reduction_emulated(name, inputs, mask_as_zero=True), ref)
    if op == "layernorm":
        assert _ok(wl, _reduction_emulated(name, inputs, one_pass_var=True), ref)
        assert not _ok(wl, _reduction_emulated(name, inputs, no_center=True), ref)
        assert not _ok(wl, _reduction_emulated(name, inputs, no_bias=True), ref)
    if op == "add":
        assert not _ok(wl, _reduction_emulated(name, inputs, no_add=True), ref)
        # FlagGems' order (fp32 sum, rounded before the weight) and three roundings both pass
        assert _ok(wl, _reduction_emulated(name, inputs, from_fp32_sum=True, flag_gems_order=True), ref)


def test_softmax_inputs_hold_masked_and_shifted_rows():
    wl = _load("softmax_16384x4096")
    x = wl.make_inputs({"rows": 64, "cols": 1000}, 3)["x"].float()
    neginf = torch.isneginf(x)
    assert neginf[1::4].any(dim=1).all() and not neginf[1::4].all(dim=1).any()  # masked, never the whole row
    assert not neginf[0::4].any() and not neginf[2::4].any() and not neginf[3::4].any()
    assert 0.15 < neginf[1::4].float().mean() < 0.35
    assert (x[2::4].mean(dim=1) > 80).all() and (x[3::4].mean(dim=1) < -80).all()
    ref = wl.reference({"x": wl.make_inputs({"rows": 64, "cols": 1000}, 3)["x"]}, {})["out"]
    assert torch.isfinite(ref).all() and (ref[neginf] == 0).all()
    one = wl.make_inputs({"rows": 5, "cols": 1}, 3)["x"]
    assert torch.isfinite(one).all()  # a one-column masked row keeps its entry


def test_grouped_split():
    g4, g8 = _load("grouped_mm_g4").module, _load("grouped_mm_g8").module
    assert g4.group_ends({"groups": 4, "M": 4096}) == [1280, 2048, 3136, 4096]
    assert g8.group_ends({"groups": 8, "M": 8192}) == [1280, 2048, 3136, 4096, 5376, 6144, 7232, 8192]
    for wl in (_load("grouped_mm_g4"), _load("grouped_mm_g8")):
        for shape in list(wl.benchmark_cases) + list(wl.probe_shapes):
            ends = wl.module.group_ends(shape)
            assert len(ends) == shape["groups"] and ends[-1] == shape["M"]
            assert all(b >= a for a, b in zip([0] + ends[:-1], ends))
            if shape.get("empty"):
                assert ends[0] == 0 and ends[2] == ends[1]
        assert torch.equal(wl.make_inputs(dict(wl.probe_shapes[0]), 1)["offs"],
                           wl.make_inputs(dict(wl.probe_shapes[0]), 2)["offs"])  # the split is the shape's
    sizes = [b - a for a, b in zip([0, 1280, 2048, 3136], [1280, 2048, 3136, 4096])]
    assert any(s % 128 for s in sizes)  # uneven: not every group a whole number of 128-row tiles


def _stress(name):
    scope: dict = {}
    f = HELDOUT / name / "stress.py"
    exec(compile(f.read_text(), str(f), "exec"), scope)
    return scope["VALUE_PROBES"]


@pytest.mark.parametrize("name", REDUCTION)
def test_stress_tables(name):
    wl = _load(name)
    shape = {"rows": 12, "cols": 40}
    for probe, fn in _stress(name).items():
        inputs = wl.make_inputs(shape, 2)
        before = {k: v.clone() for k, v in inputs.items()}
        new = fn(inputs, shape)
        assert all(torch.equal(inputs[k], before[k]) for k in inputs)  # the table does not mutate
        assert set(new) == set(inputs) and all(new[k].dtype == inputs[k].dtype for k in new)
        ref = wl.reference(new, shape)
        assert all(torch.isfinite(r).all() for r in ref.values()), probe
        out = ref["out"]
        if probe in ("zero_rows", "cancelling_rows"):
            assert (out[::3] == 0).all()
        elif probe == "constant_rows":
            assert torch.equal(out[::3], new["bias"].double().expand(4, -1))
        elif probe == "one_hot_rows":
            assert ((out[::2] == 0) | (out[::2] == 1)).all() and (out[::2].sum(dim=1) == 1).all()
        assert _ok(wl, _reduction_emulated(name, new), ref), probe


def test_vendor_names_a_missing_flag_gems(wl):
    import importlib.util

    if importlib.util.find_spec("flag_gems") is not None:
        pytest.skip("flag_gems is importable here")
    shape = _small_shapes(wl, 1)[0]
    with pytest.raises(RuntimeError, match="flag-gems wheel"):
        wl.vendor(wl.make_inputs(shape, 1), shape)


def test_fallback_formulas_match_the_oracle(wl, monkeypatch):
    """vendor_fallback's function, run eagerly (torch.compile replaced by the identity), on the CPU."""
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    monkeypatch.setattr(wl.module, "_fallback", None)
    shape = next(dict(s) for s in sorted(wl.probe_shapes, key=_numel)
                 if all(v % 8 == 0 for k, v in s.items() if k in ("N", "K")) and not s.get("alias"))
    inputs = wl.make_inputs(shape, 4)
    out = wl.module.vendor_fallback(inputs, shape)  # every op it uses has a CPU kernel in the pinned torch
    assert _ok(wl, out, wl.reference(inputs, shape))


# ---------------------------------------------------------------- nvcc: every kernel file builds

GEMM_POINTS = ({"GEMM_BLOCK_N": 256}, {"GEMM_BLOCK_M": 64, "GEMM_BLOCK_K": 64, "GEMM_STAGES": 3},
               {"GEMM_WARPS_M": 4, "GEMM_WARPS_N": 2, "GEMM_BLOCK_K": 16, "GEMM_STAGES": 2, "GEMM_GROUP_M": 1})
REDUCTION_POINTS = ({"THREADS": 64, "ITEMS": 1, "VEC": 2}, {"THREADS": 512, "VEC": 4})
ILLEGAL = (
    ("gemm_mm.cu", {"GEMM_BLOCK_M": 512}, "accumulators"),
    ("gemm_mm.cu", {"GEMM_BLOCK_N": 96}, "multiple of 16 * GEMM_WARPS_N"),
    ("gemm_grouped.cu", {"GEMM_STAGES": 1}, "GEMM_STAGES must be at least 2"),
    ("rmsnorm_idiom.cu", {"RMSNORM_THREADS": 100}, "multiple of 32"),
    ("softmax_idiom.cu", {"SOFTMAX_VEC": 3}, "SOFTMAX_VEC must be 1, 2, 4 or 8"),
)
SWEPT = ("gemm_mm.cu", "softmax_idiom.cu")


def _prefix(f: str) -> str:
    return f.split("_idiom")[0].upper() + "_" if "_idiom" in f else ""


def _builds() -> list[tuple[str, dict]]:
    jobs = [(f, {}) for f in KERNEL_FILES] + _legal_points()
    jobs += [(f, p) for f, p, _ in ILLEGAL]
    for f in SWEPT:
        jobs += [(f, p) for p in sweep_points((KERNELS / f).read_text(), [])[1:]]
    return list(dict.fromkeys((f, tuple(sorted(p.items()))) for f, p in jobs))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(file, ((name, value), ...)) -> CompileResult for every build the tests below look at, compiled in
    parallel once, into a cache of this session's (a module fixture runs before the per-test home)."""
    from klineage.gate.compile import compile_kernel

    jobs = _builds()
    cache = tmp_path_factory.mktemp("heldout-builds")

    def build(job):
        f, point = job
        return compile_kernel((KERNELS / f).read_text(), extra_flags=tuple(f"-D{k}={v}" for k, v in point),
                              cache_dir=cache)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(jobs, pool.map(build, jobs)))


@pytest.mark.nvcc
@pytest.mark.parametrize("f", KERNEL_FILES)
def test_kernel_compiles_at_its_default_without_spills(built, f):
    res = built[(f, ())]
    assert res.ok, f"{f}: {res.error_message}\n{res.log[-3000:]}"
    assert not res.spills and all(r.stack_bytes == 0 for r in res.resources), f
    kernels = 1 if "_naive" in f else (2 if f.startswith("gemm") else 4)  # fast/guarded paths; warp/block x vec/scalar
    assert len(res.resources) == kernels, [r.name for r in res.resources]
    if f.startswith("gemm"):  # the register budget allows two 8-warp blocks per SM at the default
        assert all(r.registers <= 128 for r in res.resources), [r.registers for r in res.resources]


def _legal_points() -> list[tuple[str, dict]]:
    return ([(f, p) for f in ("gemm_mm.cu", "gemm_grouped.cu") for p in GEMM_POINTS]
            + [(f, {_prefix(f) + k: v for k, v in p.items()}) for f in KERNEL_FILES if "_idiom" in f
               for p in REDUCTION_POINTS])


@pytest.mark.nvcc
def test_kernels_compile_at_non_default_points(built):
    for f, point in _legal_points():
        res = built[(f, tuple(sorted(point.items())))]
        assert res.ok, f"{f} {point}: {res.error_message}"


@pytest.mark.nvcc
@pytest.mark.parametrize("f,point,message", ILLEGAL)
def test_illegal_points_fail_with_their_reason(built, f, point, message):
    res = built[(f, tuple(sorted(point.items())))]
    assert not res.ok and "static assertion failed" in res.log and message in res.log, res.log[-2000:]


@pytest.mark.nvcc
@pytest.mark.parametrize("f", SWEPT)
def test_every_sweep_point_builds_or_says_why_not(built, f):
    """The points the sweep tries without a library: each compiles, or fails on a static_assert that
    names the tunable (never a stray compiler error)."""
    points = sweep_points((KERNELS / f).read_text(), [])[1:]
    assert len(points) >= 4
    legal = 0
    for p in points:
        res = built[(f, tuple(sorted(p.items())))]
        if res.ok:
            legal += 1
        else:
            errors = [ln for ln in res.log.splitlines() if "error" in ln and not re.search(r"errors? detected", ln)]
            assert errors and all("static assertion failed" in ln for ln in errors), (p, errors)
    assert legal >= 3, f"{f}: fewer than three sweep points build"


# ---------------------------------------------------------------- GPU: every start kernel against the oracle


def _run_case(wl, cand, shape, seed=7):
    """One call on `shape` as the gate makes it (pointer offsets, aliasing), outputs in NaN-guarded
    buffers. Returns a list of problems."""
    from klineage.gate.worker import TORCH_DTYPES, alias_outputs, place_inputs

    off = wl.pointer_offset(shape)
    fresh = wl.make_inputs(shape, seed, device="cuda")
    bufs = place_inputs(wl, shape, fresh)
    outs, guards = {}, {}
    for k, (dims, dtype) in wl.outputs(shape).items():
        n = math.prod(dims)
        g = torch.full((off + n + 64,), float("nan"), dtype=TORCH_DTYPES[dtype], device="cuda")
        outs[k], guards[k] = g[off:off + n].view(dims), (g, off, n)
    aliased = alias_outputs(wl, shape, bufs, outs)
    rc = cand.call({**bufs, **outs}, wl.scalars(shape), torch.cuda.current_stream())
    torch.cuda.synchronize()
    if rc != 0:
        return [f"{shape}: cudaError {rc}"]
    problems = []
    for k, ref in wl.reference(fresh, shape).items():
        c = compare(outs[k], ref, wl.tolerance)
        if not c.ok:
            problems.append(f"{shape} {k}: {c.reason}; first bad {c.first_bad_index}: {c.first_bad_value} vs "
                            f"{c.first_bad_expected}")
    for k, (g, o, n) in guards.items():
        if k not in aliased and not (torch.isnan(g[:o]).all() and torch.isnan(g[o + n:]).all()):
            problems.append(f"{shape} {k}: wrote outside the output")
    for k in wl.input_names:
        if k not in aliased.values() and not torch.equal(bufs[k], fresh[k]):
            problems.append(f"{shape} {k}: input modified")
    return problems


def _gpu_cases():
    cases = []
    for name in NAMES:
        for kind in sorted(_load(name).module.STARTS):
            cases.append((name, kind, ()))
    for name in ("mm_2048", "bmm_32x1024", "grouped_mm_g4"):
        cases += [(name, "idiom", tuple(sorted(p.items()))) for p in GEMM_POINTS[:2]]
    for name in REDUCTION[::2] + ("add_rmsnorm_16384x4096",):
        f = Path(_load(name).module.STARTS["idiom"]).name
        cases += [(name, "idiom", tuple(sorted({_prefix(f) + k: v for k, v in p.items()}.items())))
                  for p in REDUCTION_POINTS]
    return list(dict.fromkeys(cases))


@pytest.mark.requires_cuda
@pytest.mark.nvcc
@pytest.mark.parametrize("name,kind,point", _gpu_cases())
def test_start_kernel_on_gpu(name, kind, point):
    from klineage.gate.compile import compile_kernel
    from klineage.gate.worker import Candidate

    wl = _load(name)
    src = (HELDOUT / wl.module.STARTS[kind]).read_text()
    res = compile_kernel(src, extra_flags=tuple(f"-D{k}={v}" for k, v in point))
    assert res.ok, res.log[-3000:]
    cand = Candidate(res.so_path, wl)
    shapes = [s for k, s in wl.all_shapes() if k == "probe" or not point]  # non-default points: probes only
    problems = []
    for shape in shapes:
        problems += _run_case(wl, cand, dict(shape))
        torch.cuda.empty_cache()
    assert not problems, "\n".join(problems[:10])
