"""The apply-stage workloads in apply_workloads/ (gelu, rope, axpby): operators outside the expert
corpus and outside the held-out families, each a workload.py under the klineage contract and a
deliberately plain naive.cu for an apply stage to make faster (the folder's admission targets,
linear_bias and log_softmax, are checked in tests/heldout/test_admission_targets.py).

Checked here without a GPU: each workload loads; its contract functions agree with the formulas in
their comments; the float64 oracle matches a hand computation on small shapes; the vendor passes
the tolerance, the negative controls and wrong formulas or precision shortcuts do not, fp32 variants
of the arithmetic do; the probe shapes misalign bases and miss the vector width; the naive kernels
keep the ABI, pass the static guard, carry no optimization a detector sees, expose their tunables
as overridable macros, and compile with nvcc without spills. With a GPU (`requires_cuda`), each
naive kernel also runs on every shape and is checked against the oracle and for writes outside out.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from klineage.gate.correctness import compare, negative_controls
from klineage.gate.guard import check_source, strip_comments
from klineage.workload import Tolerance, load_workload

ROOT = Path(__file__).resolve().parents[1]
APPLY_DIR = ROOT / "apply_workloads"
NAMES = ("gelu", "rope", "axpby")
# workloads of the held-out families written as admission targets (tests/heldout/test_admission_targets.py)
ADMISSION = ("linear_bias", "log_softmax")
HELD_OUT = ("gemm", "matmul", "attention", "rmsnorm", "layernorm", "softmax", "norm")
TUNABLES = {"gelu": ("GELU_BLOCK",), "rope": ("ROPE_BLOCK",), "axpby": ("AXPBY_BLOCK",)}
SIGNATURES = {
    "gelu": 'extern "C" cudaError_t gelu(const __nv_bfloat16* x, __nv_bfloat16* out, int rows, int cols, '
            'cudaStream_t stream)',
    "rope": 'extern "C" cudaError_t rope(const __nv_bfloat16* x, const float* cos_tab, const float* sin_tab, '
            '__nv_bfloat16* out, int tokens, int heads, int dim, cudaStream_t stream)',
    "axpby": 'extern "C" cudaError_t axpby(const float* x, const float* y, float* out, long long n, '
             'float alpha, float beta, cudaStream_t stream)',
}


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16)


def _numel(shape: dict) -> int:
    return math.prod(v for k, v in shape.items() if k != "offset")


def _source(name: str) -> str:
    return (APPLY_DIR / name / "naive.cu").read_text()


@pytest.fixture(scope="module", params=NAMES)
def wl(request):
    return load_workload(APPLY_DIR / request.param)


def _load(name):
    return load_workload(APPLY_DIR / name)


# ---------------------------------------------------------------- files and the contract


def test_folders_hold_a_workload_and_a_naive_kernel():
    # the folders without workload.py are packages the workloads share (rowops)
    folders = {p.name for p in APPLY_DIR.iterdir() if p.is_dir() and (p / "workload.py").is_file()}
    assert set(NAMES) | set(ADMISSION) <= folders
    for name in folders:
        assert (APPLY_DIR / name / "workload.py").is_file() and (APPLY_DIR / name / "naive.cu").is_file()


def test_operators_are_new(wl):
    corpus = {p.name for p in (ROOT / "expert_kernels").iterdir() if p.is_dir()}
    corpus_names = {load_workload(ROOT / "expert_kernels" / d).name for d in corpus}
    assert wl.name not in corpus | corpus_names
    assert not any(h in wl.name.lower() or h in wl.family.lower() for h in HELD_OUT)
    assert wl.family == {"gelu": "elementwise", "rope": "positional", "axpby": "elementwise"}[wl.name]
    assert wl.entry == wl.name and not wl.stateful


def test_signature(wl):
    assert wl.c_signature == SIGNATURES[wl.name]
    assert wl.output_names == ("out",)
    assert wl.input_names == {"gelu": ("x",), "rope": ("x", "cos_tab", "sin_tab"), "axpby": ("x", "y")}[wl.name]


def test_benchmark_cases_and_formulas(wl):
    if wl.name == "gelu":
        assert [dict(s) for s in wl.benchmark_cases] == [{"rows": 16384, "cols": 8192}]
        assert wl.dtypes == ("bfloat16",)
        for _, s in wl.all_shapes():
            n = s["rows"] * s["cols"]
            assert wl.bytes_moved(s) == 4 * n and wl.flops(s) == 9 * n
            assert wl.outputs(s) == {"out": ((s["rows"], s["cols"]), "bfloat16")}
            assert wl.scalars(s) == {"rows": s["rows"], "cols": s["cols"]}
        assert "F.gelu" in wl.vendor_name and "tanh" in wl.vendor_name
    elif wl.name == "rope":
        assert [dict(s) for s in wl.benchmark_cases] == [{"tokens": 16384, "heads": 32, "dim": 128}]
        assert wl.dtypes == ("bfloat16", "float32")
        for _, s in wl.all_shapes():
            t, h, d = s["tokens"], s["heads"], s["dim"]
            assert d % 2 == 0
            assert wl.bytes_moved(s) == 2 * t * h * d * 2 + 2 * 4 * t * (d // 2)
            assert wl.flops(s) == 6 * t * h * (d // 2)
            assert wl.outputs(s) == {"out": ((t, h, d), "bfloat16")}
            assert wl.scalars(s) == {"tokens": t, "heads": h, "dim": d}
        assert "torch eager" in wl.vendor_name
    else:
        assert [dict(s) for s in wl.benchmark_cases] == [{"n": 1 << 27}]
        assert wl.dtypes == ("float32",)
        assert [a.kind for a in wl.args[3:]] == ["int64", "float", "float"]
        seen = set()
        for _, s in wl.all_shapes():
            sc = wl.scalars(s)
            assert wl.bytes_moved(s) == 12 * s["n"] and wl.flops(s) == 3 * s["n"]
            assert wl.outputs(s) == {"out": ((s["n"],), "float32")}
            assert sc["n"] == s["n"] and isinstance(sc["alpha"], float) and isinstance(sc["beta"], float)
            for v in (sc["alpha"], sc["beta"]):  # exact in fp32, neither 0 nor 1
                assert v not in (0.0, 1.0) and float(torch.tensor(v, dtype=torch.float32)) == v
            seen.add((sc["alpha"], sc["beta"]))
        assert len(seen) == 3, "the coefficients change with the length"
        assert "torch.add" in wl.vendor_name


def test_probe_shapes_stress_the_kernels_assumptions(wl):
    probes = [dict(s) for s in wl.probe_shapes]
    assert {1, 3} <= {wl.pointer_offset(s) for s in probes}, "misaligned bases (offsets 1 and 3)"
    assert any(_numel(s) % 8 for s in probes), "a size not divisible by 8"
    assert any(_numel(s) % 8 and wl.pointer_offset(s) for s in probes), "a ragged size at a misaligned base"
    assert min(_numel(s) for s in probes) <= 2, "a tiny size"
    assert max(_numel(s) for s in probes) > 2_000_000, "a size where a grid-stride fallback loops"
    assert sum(_numel(s) for s in probes) < 8_000_000, "the probe set stays small"
    if wl.name == "rope":
        half_widths = {s["dim"] // 2 for s in probes}
        assert any(h % 4 for h in half_widths) and any(h % 2 for h in half_widths) and 1 in half_widths
        assert any(s["heads"] % 2 for s in probes)


def test_make_inputs_shapes_deterministic_and_seed_dependent(wl):
    for s in wl.probe_shapes:
        if _numel(s) > 300_000:
            continue
        a, b, c = wl.make_inputs(s, 1), wl.make_inputs(s, 1), wl.make_inputs(s, 2)
        assert set(a) == set(wl.input_names)
        for k in a:
            assert torch.equal(a[k], b[k]) and a[k].is_contiguous()
        assert any(not torch.equal(a[k], c[k]) for k in a) or _numel(s) == 1
        dims = wl.outputs(s)["out"][0]
        if wl.name == "rope":
            assert a["x"].shape == dims and a["x"].dtype == torch.bfloat16
            for k in ("cos_tab", "sin_tab"):
                assert a[k].shape == (s["tokens"], s["dim"] // 2) and a[k].dtype == torch.float32
            assert torch.allclose(a["cos_tab"].double() ** 2 + a["sin_tab"].double() ** 2,
                                  torch.ones(()).double(), atol=1e-6), "real rotation tables"
        else:
            dt = torch.bfloat16 if wl.name == "gelu" else torch.float32
            assert all(t.shape == dims and t.dtype == dt for t in a.values())


# ---------------------------------------------------------------- the oracle, vendor and tolerance


def test_gelu_reference_is_the_float64_formula():
    wl = _load("gelu")
    k = math.sqrt(2.0 / math.pi)
    for s in ({"rows": 1, "cols": 1}, {"rows": 3, "cols": 5}, {"rows": 7, "cols": 129}):
        inputs = wl.make_inputs(s, seed=3)
        ref = wl.reference(inputs, s)["out"]
        assert ref.dtype == torch.float64 and tuple(ref.shape) == (s["rows"], s["cols"])
        x = inputs["x"]
        for r in range(s["rows"]):
            for c in range(s["cols"]):
                v = float(x[r, c])
                want = 0.5 * v * (1.0 + math.tanh(k * (v + 0.044715 * v ** 3)))
                assert abs(ref[r, c].item() - want) <= 1e-12 * max(1.0, abs(want))


def test_rope_reference_is_the_float64_rotation():
    wl = _load("rope")
    for s in ({"tokens": 1, "heads": 1, "dim": 2}, {"tokens": 3, "heads": 5, "dim": 10},
              {"tokens": 4, "heads": 2, "dim": 128}):
        inputs = wl.make_inputs(s, seed=3)
        ref = wl.reference(inputs, s)["out"]
        assert ref.dtype == torch.float64 and tuple(ref.shape) == (s["tokens"], s["heads"], s["dim"])
        x, ct, st = inputs["x"], inputs["cos_tab"], inputs["sin_tab"]
        half = s["dim"] // 2
        for t in range(s["tokens"]):
            for h in range(s["heads"]):
                for i in range(half):
                    x1, x2 = float(x[t, h, i]), float(x[t, h, i + half])
                    c, sn = float(ct[t, i]), float(st[t, i])
                    assert abs(ref[t, h, i].item() - (x1 * c - x2 * sn)) <= 1e-12
                    assert abs(ref[t, h, i + half].item() - (x2 * c + x1 * sn)) <= 1e-12
    # the tables are cos/sin of (start + token) * 10000^(-2i/dim), the same start for every pair
    s = {"tokens": 6, "heads": 1, "dim": 8}
    inputs = wl.make_inputs(s, seed=5)
    ang = torch.atan2(inputs["sin_tab"].double(), inputs["cos_tab"].double())
    inv = 10000.0 ** (-torch.arange(4, dtype=torch.float64) * 2 / 8)
    step = torch.remainder(ang[1:] - ang[:-1], 2 * math.pi)
    assert torch.allclose(step, torch.remainder(inv, 2 * math.pi).expand_as(step), atol=1e-5)
    assert float(ang[0, 0]) != 0.0, "the first token is already rotated"


def test_axpby_reference_is_the_float64_combination():
    wl = _load("axpby")
    for s in ({"n": 1}, {"n": 7}, {"n": 1000}):
        inputs = wl.make_inputs(s, seed=3)
        ref = wl.reference(inputs, s)["out"]
        sc = wl.scalars(s)
        assert ref.dtype == torch.float64 and tuple(ref.shape) == (s["n"],)
        for i in range(s["n"]):
            want = sc["alpha"] * float(inputs["x"][i]) + sc["beta"] * float(inputs["y"][i])
            assert abs(ref[i].item() - want) <= 1e-12 * max(1.0, abs(want))


SMALL = {
    "gelu": [{"rows": 3, "cols": 5}, {"rows": 17, "cols": 1023}, {"rows": 256, "cols": 4096}],
    "rope": [{"tokens": 3, "heads": 5, "dim": 10}, {"tokens": 17, "heads": 7, "dim": 128},
             {"tokens": 512, "heads": 8, "dim": 128}],
    "axpby": [{"n": 7}, {"n": 4099}, {"n": 1 << 20}, {"n": (1 << 20) + 1}, {"n": (1 << 20) + 2}],
}


def test_vendor_passes_and_negative_controls_fail(wl):
    want_dtype = {"gelu": torch.bfloat16, "rope": torch.bfloat16, "axpby": torch.float32}[wl.name]
    for s in SMALL[wl.name]:
        for seed in (1, 2):
            inputs = wl.make_inputs(s, seed)
            refs = wl.reference(inputs, s)
            vend = wl.vendor(inputs, s)
            assert set(vend) == set(refs) == {"out"}
            assert vend["out"].dtype == want_dtype and tuple(vend["out"].shape) == tuple(refs["out"].shape)
            c = compare(vend["out"], refs["out"], wl.tolerance)
            assert c.ok and c.matched_fraction == 1.0, (s, seed, c.reason)
            controls = negative_controls(wl, inputs, refs, s)
            assert controls["zeros"]["rejected"] and controls["copy_of_input"]["rejected"], (s, controls)


def _gelu_variants(x: torch.Tensor) -> tuple[dict, dict]:
    xf = x.float()
    u = 0.7978845608028654 * (xf + 0.044715 * xf ** 3)
    t = torch.tanh(u)
    xb = x  # every step rounded to bf16
    ub = _bf16(0.7978845608028654 * _bf16(xb + _bf16(0.044715 * _bf16(xb * _bf16(xb * xb)))))
    good = {
        "fp32_tanhf": _bf16(0.5 * xf * (1 + t)),
        "fast_tanh": _bf16(0.5 * xf * (1 + (t - 2.0 ** -11 * torch.sign(t)))),  # tanh.approx's error bound
        "x_sigmoid_2u": _bf16(xf * torch.sigmoid(2 * u)),
    }
    bad = {
        "bf16_math": _bf16(0.5 * xb * _bf16(1 + torch.tanh(ub))),
        "relu": _bf16(torch.relu(xf)),
        "silu": _bf16(xf * torch.sigmoid(xf)),
        "sigmoid_1.702": _bf16(xf * torch.sigmoid(1.702 * xf)),
    }
    return good, bad


def _rope_variants(inputs: dict) -> tuple[dict, dict]:
    x = inputs["x"].float()
    c, s = inputs["cos_tab"][:, None, :], inputs["sin_tab"][:, None, :]
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    cb, sb = _bf16(c).float(), _bf16(s).float()
    xe, xo = x[..., 0::2], x[..., 1::2]
    inter = torch.empty_like(x)
    inter[..., 0::2], inter[..., 1::2] = xe * c - xo * s, xo * c + xe * s
    good = {
        "fp32": _bf16(torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1)),
        "fma": _bf16(torch.cat((torch.addcmul(-x2 * s, x1, c), torch.addcmul(x1 * s, x2, c)), -1)),
    }
    bad = {
        "bf16_tables": _bf16(torch.cat((x1 * cb - x2 * sb, x2 * cb + x1 * sb), -1)),
        "bf16_products": _bf16(torch.cat((_bf16(x1 * c).float() - _bf16(x2 * s).float(),
                                          _bf16(x2 * c).float() + _bf16(x1 * s).float()), -1)),
        "sign_swapped": _bf16(torch.cat((x1 * c + x2 * s, x2 * c - x1 * s), -1)),
        "interleaved_pairs": _bf16(inter),
        "table_of_token_0": _bf16(torch.cat((x1 * c[:1] - x2 * s[:1], x2 * c[:1] + x1 * s[:1]), -1)),
    }
    return good, bad


def _axpby_variants(inputs: dict, sc: dict) -> tuple[dict, dict]:
    x, y, a, b = inputs["x"], inputs["y"], sc["alpha"], sc["beta"]
    good = {"fp32": a * x + b * y, "fma": torch.addcmul(b * y, x, torch.tensor(a))}
    bad = {
        "bf16_inputs": a * x.bfloat16().float() + b * y.bfloat16().float(),
        "fp16_math": (a * x.half() + b * y.half()).float(),
        "coefs_swapped": b * x + a * y,
        "beta_dropped": a * x + y,
    }
    return good, bad


def _variants(wl, inputs, s):
    """(good, bad) output variants of the workload's computation on `inputs`."""
    if wl.name == "gelu":
        return _gelu_variants(inputs["x"])
    if wl.name == "rope":
        return _rope_variants(inputs)
    return _axpby_variants(inputs, wl.scalars(s))


def test_tolerance_admits_fp32_arithmetic_and_rejects_shortcuts(wl):
    strict = Tolerance(wl.tolerance.rtol, wl.tolerance.atol, 1.0)
    for s in SMALL[wl.name][-2:]:
        for seed in (1, 2, 3):
            inputs = wl.make_inputs(s, seed)
            ref = wl.reference(inputs, s)["out"]
            good, bad = _variants(wl, inputs, s)
            for k, out in good.items():
                c = compare(out, ref, strict)
                assert c.ok, (k, s, seed, c.reason)
            for k, out in bad.items():
                assert not compare(out, ref, wl.tolerance).ok, (k, s, seed)


def test_tolerance_at_large_magnitudes(wl):
    """The prober's large_magnitude probe scales every float input by 1000: fp32 math still passes."""
    s = SMALL[wl.name][-1]
    inputs = {k: (t * 1000.0).to(t.dtype) for k, t in wl.make_inputs(s, 1).items()}
    ref = wl.reference(inputs, s)["out"]
    good, _ = _variants(wl, inputs, s)
    assert torch.isfinite(ref).all()
    for k, out in good.items():
        assert compare(out, ref, wl.tolerance).ok, k


# ---------------------------------------------------------------- the naive kernels


@pytest.mark.parametrize("name", NAMES)
def test_naive_abi_and_plainness(name):
    wl = _load(name)
    src = _source(name)
    code = strip_comments(src)[0]
    assert "#include <cuda_runtime.h>" in src
    assert src.count(wl.c_signature) == 1, f"must export {wl.c_signature}"
    assert src.count('extern "C"') == 1 and len(re.findall(r'\bextern\b', code)) == 1
    launches = re.findall(r"<<<[^>]*>>>", code)
    assert len(launches) == 1 and re.fullmatch(r"<<<[^>]*,\s*0,\s*stream>>>", launches[0])
    assert "return cudaGetLastError();" in code
    assert re.search(r"if \((n|pairs) (<=|==) 0\) return cudaSuccess;", code), "n == 0 launches nothing"
    assert "long long" in code, "64-bit index math"
    for pat, what in ((r"\batomic\w*\s*\(", "atomics"), (r"\bstatic\b", "static state"),
                      (r"cudaMalloc|cudaMemset|cudaFree", "allocation or init"), (r"__restrict__", "__restrict__"),
                      (r"#pragma", "pragmas"), (r"__launch_bounds__", "launch bounds"),
                      (r"\b(float[24]|uint[24]|int[24]|__nv_bfloat162|half2)\b", "vector types"),
                      (r"\b__(expf|exp2f|tanhf|fdividef|frcp\w*|fmul\w*|fadd\w*|ldg|ldcs|ldcg|stcs)\b", "intrinsics"),
                      (r"asm\s*\(", "inline PTX"), (r"__shfl|__shared__", "cooperation")):
        assert not re.search(pat, code), f"{name}: naive kernel uses {what}"
    assert len(re.findall(r"__global__", code)) == 1


@pytest.mark.parametrize("name", NAMES)
def test_naive_tunables_are_overridable_macros(name):
    src = _source(name)
    assert "// ---- tuning constants (override with -DNAME=value) ----" in src
    for macro in TUNABLES[name]:
        assert re.search(rf"#ifndef {macro}\n#define {macro} \d+ +// \S", src), macro
        assert re.search(rf"<<<[^>]*\b{macro}\b", src), f"{macro} is not the launch's block size"


@pytest.mark.parametrize("name", NAMES)
def test_naive_passes_the_static_guard_and_has_no_detected_mechanism(name):
    from klineage.mechanisms import detect_all

    wl = _load(name)
    res = check_source(_source(name), wl)
    assert res.ok, res.summary
    assert [f.mechanism for f in detect_all(_source(name))] == []


@pytest.mark.nvcc
@pytest.mark.parametrize("name", NAMES)
def test_naive_compiles(name):
    from klineage.gate.compile import compile_kernel

    for flags in ((), (f"-D{TUNABLES[name][0]}=512",)):
        res = compile_kernel(_source(name), extra_flags=flags)
        assert res.ok, f"{name} {flags}: {res.error_message}\n{res.log}"
        assert len(res.resources) == 1, f"{name}: one kernel in the ptxas report"
        assert not res.spills, f"{name} {flags}: spills registers"
        assert res.resources[0].shared_bytes == 0 and res.resources[0].stack_bytes == 0


# ---------------------------------------------------------------- GPU: the naive kernels against the oracle


@pytest.mark.requires_cuda
@pytest.mark.nvcc
@pytest.mark.parametrize("name", NAMES)
def test_naive_matches_oracle_on_gpu(name):
    from klineage.gate.compile import compile_kernel
    from klineage.gate.worker import TORCH_DTYPES, Candidate, place_inputs

    wl = _load(name)
    res = compile_kernel(_source(name))
    assert res.ok, res.log
    cand = Candidate(res.so_path, wl)
    stream = torch.cuda.current_stream()
    strict = Tolerance(wl.tolerance.rtol, wl.tolerance.atol, 1.0)
    for _, shape in wl.all_shapes():
        off = wl.pointer_offset(shape)
        fresh = wl.make_inputs(shape, 7, device="cuda")
        bufs = place_inputs(wl, shape, fresh)
        dims, dtype = wl.outputs(shape)["out"]
        n = math.prod(dims)
        obuf = torch.full((n + off + 1,), float("nan"), dtype=TORCH_DTYPES[dtype], device="cuda")
        out = obuf[off:off + n].view(dims)
        rc = cand.call({**bufs, "out": out}, wl.scalars(shape), stream)
        torch.cuda.synchronize()
        assert rc == 0, f"{name} {shape}: cudaError {rc}"
        c = compare(out, wl.reference(fresh, shape)["out"], strict)
        assert c.ok, f"{name} {shape}: {c.reason} first bad {c.first_bad_index}"
        assert torch.isnan(obuf[:off]).all() and torch.isnan(obuf[off + n]), f"{name} {shape}: wrote outside out"
        assert all(torch.equal(bufs[k], fresh[k]) for k in fresh), f"{name} {shape}: modified an input"
        del fresh, bufs, obuf, out
        torch.cuda.empty_cache()
