"""The held-out instances of the attention family (issue 8): heldout/attn_*/workload.py (+ stress.py)
and their one idiom-only start kernel, heldout/kernels/attn_idiom.cu.

Checked here without a GPU: every instance loads as a held-out instance (family, start kernel,
fallback), its benchmark case and head counts match its name, inputs / outputs / scalars agree with
ARGS; the float64 oracle matches an independent per-row softmax loop and torch's float64 SDPA
(causal, non-causal, grouped-query heads, ragged and one-row sequences) and its chunking changes
nothing; the planted score shifts overflow a naive exp; the tolerance passes an emulation of an
honest fp16 kernel (with its online-softmax tiles) and rejects bf16 weights, a lost key tile, an
off-by-one causal mask, a wrong kv-head mapping and the negative controls; vendor() names a
missing FlagGems and a changed signature instead of falling back. With nvcc, the kernel compiles
for sm_90a at its default without spills, at non-default legal points without spills, and every
illegal point fails on the static_assert naming its tunable. With a GPU (`requires_cuda`), the
kernel runs every shape against the oracle (and the references run).
"""
from __future__ import annotations

import inspect
import math
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from klineage.apply.materialize import sweep_points, tunables
from klineage.gate.correctness import compare, negative_controls
from klineage.gate.guard import check_source
from klineage.tuning import ROLES
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
HELDOUT = ROOT / "heldout"
KERNEL = HELDOUT / "kernels" / "attn_idiom.cu"
NAMES = ("attn_causal_b4_s1024", "attn_causal_b2_s4096", "attn_causal_b1_s8192", "attn_noncausal_b2_s2048",
         "attn_gqa_b2_s2048", "attn_gqa_b1_s4096")
D = 128


def _load(name):
    return load_workload(HELDOUT / name)


@pytest.fixture(scope="module", params=NAMES)
def wl(request):
    return _load(request.param)


def _expected(name: str) -> tuple[bool, dict]:
    """(causal, benchmark case) an instance's name promises: 32 query heads; GQA 32 / 8 and causal."""
    m = re.fullmatch(r"attn_(causal|noncausal|gqa)_b(\d+)_s(\d+)", name)
    kind, b, s = m.group(1), int(m.group(2)), int(m.group(3))
    return kind != "noncausal", {"batch": b, "heads": 32, "kv_heads": 8 if kind == "gqa" else 32, "seq": s}


# ---------------------------------------------------------------- files and the contract


def test_instances_load_as_heldout_instances():
    from klineage.heldout.instances import load_instance

    for name in NAMES:
        inst = load_instance(HELDOUT / name, HELDOUT)
        assert inst.name == name and inst.family == "attention"
        assert set(inst.starts) == {"idiom"} and inst.starts["idiom"][0] == "kernels/attn_idiom.cu"
        assert inst.starts["idiom"][1] == KERNEL.read_text()
        assert inst.has_fallback and "FLASH_ATTENTION" in inst.fallback_name


def test_instance_contract(wl):
    name = wl.path.parent.name
    causal, case = _expected(name)
    mod = wl.module
    assert wl.name == name and wl.family == "attention" and not wl.stateful
    assert wl.dtypes == ("float16",) and wl.entry == "attention_fwd"
    assert [dict(c) for c in wl.benchmark_cases] == [case]
    assert mod.CAUSAL is causal and mod.GQA is (case["kv_heads"] != case["heads"])
    assert mod.HEAD_DIM == D and mod.SCALE == 1 / math.sqrt(D)
    assert "flag_gems.ops.scaled_dot_product_attention" in wl.vendor_name
    assert f"is_causal={causal}" in wl.vendor_name and f"enable_gqa={mod.GQA}" in wl.vendor_name
    assert "FLASH_ATTENTION" in mod.VENDOR_FALLBACK and callable(mod.vendor_fallback)
    assert mod.STARTS == {"idiom": "kernels/attn_idiom.cu"}
    guard = check_source(KERNEL.read_text(), wl)
    assert guard.ok, guard.summary
    assert wl.c_signature == ('extern "C" cudaError_t attention_fwd(const __half* q, const __half* k, '
                              'const __half* v, __half* out, int batch, int heads, int kv_heads, int seq, '
                              'int head_dim, int causal, cudaStream_t stream)')


def test_instances_differ_only_in_their_case():
    """One workload text: the six files differ in the docstring, NAME, CAUSAL, GQA, the benchmark
    case and the head counts of the probe shapes (so a fix to one is a fix to all)."""
    def body(name):
        text = (HELDOUT / name / "workload.py").read_text()
        text = text.split('"""', 2)[2]  # drop the docstring
        for pat in (r'NAME = "\w+"', r"CAUSAL = \w+", r"GQA = \w+", r"BENCHMARK_CASES = .*", r"'heads': \d+",
                    r"'kv_heads': \d+", r"is_causal=\w+", r"enable_gqa=\w+", r"\(\d query heads per kv head\)",
                    r"\(heads == kv_heads\)"):
            text = re.sub(pat, "", text)
        return text
    bodies = {name: body(name) for name in NAMES}
    assert len(set(bodies.values())) == 1
    stress = {(HELDOUT / n / "stress.py").read_text().split('"""', 2)[2] for n in NAMES}
    assert len(stress) == 1


def test_probe_shapes_stress_the_kernel(wl):
    probes = [dict(s) for s in wl.probe_shapes]
    seqs = {s["seq"] for s in probes}
    assert 1 in seqs and {17, 100, 257} <= seqs                       # one row; off every tile size
    assert any(s % 64 == 0 and s > 256 for s in seqs)                 # whole tiles, several of them
    assert any(s > 512 and s % 16 for s in seqs)                      # several tiles with a ragged tail
    assert {1, 8} <= {s.get("offset", 0) for s in probes}             # misaligned; 16- but not 256-byte aligned
    ratio = wl.benchmark_cases[0]["heads"] // wl.benchmark_cases[0]["kv_heads"]
    for s in probes:
        assert s["heads"] == ratio * s["kv_heads"]                    # the instance's head grouping
    assert any(s["batch"] > 1 for s in probes) and any(s["kv_heads"] > 1 for s in probes)
    assert all(s["batch"] * s["heads"] * s["seq"] <= 8192 for s in probes)  # quick for the float64 oracle


def test_inputs_outputs_scalars_agree_with_args(wl):
    for shape in wl.probe_shapes:
        ins = wl.make_inputs(shape, 3)
        b, h, hkv, s = shape["batch"], shape["heads"], shape["kv_heads"], shape["seq"]
        assert set(ins) == {"q", "k", "v"}
        assert ins["q"].shape == (b, h, s, D) and ins["k"].shape == ins["v"].shape == (b, hkv, s, D)
        assert all(t.dtype == torch.float16 and t.is_contiguous() for t in ins.values())
        assert wl.outputs(shape) == {"out": ((b, h, s, D), "float16")}
        assert wl.scalars(shape) == {"batch": b, "heads": h, "kv_heads": hkv, "seq": s, "head_dim": D,
                                     "causal": int(wl.module.CAUSAL)}


def test_inputs_depend_on_the_seed_only(wl):
    shape = wl.probe_shapes[2]
    a, b, c = wl.make_inputs(shape, 1), wl.make_inputs(shape, 1), wl.make_inputs(shape, 2)
    for k in a:
        assert torch.equal(a[k], b[k]) and not torch.equal(a[k], c[k])


def test_bytes_and_flops(wl):
    s = wl.benchmark_cases[0]
    b, h, hkv, n = s["batch"], s["heads"], s["kv_heads"], s["seq"]
    assert wl.bytes_moved(s) == 2 * D * n * b * (2 * h + 2 * hkv)
    pairs = n * (n + 1) // 2 if wl.module.CAUSAL else n * n
    assert wl.flops(s) == 4 * D * b * h * pairs
    assert wl.flops(s) / wl.bytes_moved(s) > 50  # compute-bound: the gate's FLOP floor applies


# ---------------------------------------------------------------- the oracle


def _loop_reference(q, k, v, causal):
    """Attention written out row by row in float64: for each query, its visible keys' scores, their
    max, the exponentials, their sum, the weighted values (query head h reads kv head h // g)."""
    bsz, h, s, d = q.shape
    g = h // k.shape[1]
    out = torch.zeros(bsz, h, s, d, dtype=torch.float64)
    for bi in range(bsz):
        for hi in range(h):
            kk, vv = k[bi, hi // g].double(), v[bi, hi // g].double()
            for i in range(s):
                n = i + 1 if causal else s
                scores = [float(q[bi, hi, i].double() @ kk[j]) / math.sqrt(d) for j in range(n)]
                m = max(scores)
                w = [math.exp(x - m) for x in scores]
                total = sum(w)
                out[bi, hi, i] = sum(wj * vv[j] for j, wj in enumerate(w)) / total
    return out


@pytest.mark.parametrize("name,shape", [
    ("attn_causal_b4_s1024", {"batch": 2, "heads": 2, "kv_heads": 2, "seq": 9}),
    ("attn_causal_b4_s1024", {"batch": 1, "heads": 1, "kv_heads": 1, "seq": 1}),
    ("attn_noncausal_b2_s2048", {"batch": 1, "heads": 3, "kv_heads": 3, "seq": 7}),
    ("attn_gqa_b2_s2048", {"batch": 2, "heads": 8, "kv_heads": 2, "seq": 6}),
])
def test_reference_matches_a_row_by_row_loop(name, shape):
    wl = _load(name)
    ins = wl.make_inputs(shape, 5)
    ref = wl.reference(ins, shape)["out"]
    assert ref.dtype == torch.float64 and ref.shape == (shape["batch"], shape["heads"], shape["seq"], D)
    loop = _loop_reference(ins["q"], ins["k"], ins["v"], wl.module.CAUSAL)
    assert torch.allclose(ref, loop, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_reference_matches_torch_sdpa_in_float64(name):
    wl = _load(name)
    mod = wl.module
    for shape in wl.probe_shapes[:4]:
        ins = wl.make_inputs(shape, 2)
        ref = wl.reference(ins, shape)["out"]
        q, k, v = (ins[n].double() for n in ("q", "k", "v"))
        g = shape["heads"] // shape["kv_heads"]
        sdpa = torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1), is_causal=mod.CAUSAL, scale=mod.SCALE)
        assert torch.allclose(ref, sdpa, rtol=1e-9, atol=1e-10), shape


def test_reference_chunks_change_nothing(monkeypatch):
    for name in ("attn_causal_b4_s1024", "attn_gqa_b2_s2048"):
        wl = _load(name)
        shape = {"batch": 1, "heads": 8, "kv_heads": 2 if wl.module.GQA else 8, "seq": 100}
        ins = wl.make_inputs(shape, 4)
        whole = wl.reference(ins, shape)["out"]
        monkeypatch.setattr(wl.module, "_REF_ELEMS", 4 * 100 * 7)  # 7-row chunks
        assert torch.allclose(wl.reference(ins, shape)["out"], whole, rtol=1e-12, atol=1e-14)


def test_planted_shifts_overflow_a_naive_exp():
    wl = _load("attn_causal_b4_s1024")
    shape = {"batch": 1, "heads": 2, "kv_heads": 2, "seq": 64}
    ins = wl.make_inputs(shape, 1)
    scores = (ins["q"].double() @ ins["k"].double().transpose(-1, -2)) * wl.module.SCALE
    rows = torch.arange(64)
    assert (scores[:, :, rows % 4 == 2] > 100).all()   # exp overflows fp32 (and exp2 of the log2e-scaled score)
    assert (scores[:, :, rows % 4 == 3] < -100).all()  # exp underflows to 0: a naive sum is 0
    assert (scores[:, :, rows % 4 < 2].abs() < 30).all()
    assert torch.isfinite(wl.reference(ins, shape)["out"]).all()
    # the shift is row-constant, so the softmax of a shifted row is that of the unshifted row
    plain = dict(ins, q=ins["q"].clone())
    plain["q"][..., 0] = 0
    shape_ref = wl.reference(ins, shape)["out"]
    assert torch.allclose(shape_ref, wl.reference(plain, shape)["out"], rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- the tolerance


def _emulated_kernel(q, k, v, causal, p_dtype=torch.float16, block_n=64, drop_tile=None, off_by_one=False,
                     kv_map="group"):
    """fp32 online softmax over key tiles as an honest fp16 kernel computes it (fp16 inputs, fp32 scores,
    weights rounded to p_dtype against the running max, fp32 sums, fp16 output), with the bugs the
    tolerance must catch switchable."""
    bsz, h, s, d = q.shape
    hkv = k.shape[1]
    idx = torch.arange(h) // (h // hkv) if kv_map == "group" else torch.arange(h) % hkv
    kf, vf = k.float()[:, idx], v.float()[:, idx]
    scores = (q.float() @ kf.transpose(-1, -2)) / math.sqrt(d)
    if causal:
        scores = scores.masked_fill(~torch.ones(s, s, dtype=torch.bool).tril(1 if off_by_one else 0), float("-inf"))
    m = torch.full((bsz, h, s, 1), float("-inf"))
    total = torch.zeros(bsz, h, s, 1)
    acc = torch.zeros(bsz, h, s, d)
    for j, n0 in enumerate(range(0, s, block_n)):
        if j == drop_tile:
            continue
        st = scores[..., n0:n0 + block_n]
        m_new = torch.maximum(m, st.amax(-1, keepdim=True))
        alpha = torch.exp(m - m_new)
        p = torch.exp(st - m_new)
        total = total * alpha + p.sum(-1, keepdim=True)
        acc = acc * alpha + p.to(p_dtype).float() @ vf[..., n0:n0 + block_n, :]
        m = m_new
    return (acc / total).to(torch.float16)


def _tol_shapes():
    return [("attn_causal_b4_s1024", {"batch": 1, "heads": 2, "kv_heads": 2, "seq": 1000}),
            ("attn_noncausal_b2_s2048", {"batch": 1, "heads": 2, "kv_heads": 2, "seq": 1000}),
            ("attn_gqa_b2_s2048", {"batch": 1, "heads": 8, "kv_heads": 2, "seq": 512})]


@pytest.mark.parametrize("name,shape", _tol_shapes())
def test_tolerance_passes_honest_fp16_and_rejects_shortcuts(name, shape):
    wl = _load(name)
    causal = wl.module.CAUSAL
    ins = wl.make_inputs(shape, 11)
    ref = wl.reference(ins, shape)["out"]
    q, k, v = ins["q"], ins["k"], ins["v"]
    for bn in (32, 64, 128):
        c = compare(_emulated_kernel(q, k, v, causal, block_n=bn), ref, wl.tolerance)
        assert c.ok and c.matched_fraction == 1.0, (bn, c.reason)
    bad = {"bf16 weights": _emulated_kernel(q, k, v, causal, p_dtype=torch.bfloat16),
           "lost key tile": _emulated_kernel(q, k, v, causal, drop_tile=3)}
    if causal:
        bad["causal mask off by one"] = _emulated_kernel(q, k, v, causal, off_by_one=True)
    if wl.module.GQA:
        bad["kv head h % kv_heads"] = _emulated_kernel(q, k, v, causal, kv_map="modulo")
    for what, out in bad.items():
        assert not compare(out, ref, wl.tolerance).ok, what


def test_tolerance_catches_one_wrong_row_in_every_probe_shape(wl):
    for shape in wl.probe_shapes:
        ins = wl.make_inputs(shape, 1)
        ref = wl.reference(ins, shape)["out"]
        assert compare(ref.to(torch.float16), ref, wl.tolerance).ok
        wrong = ref.clone()
        wrong[-1, -1, -1] = -ref[-1, -1, -1]  # the last row of the last head wrong (negated)
        assert not compare(wrong, ref, wl.tolerance).ok, shape


def test_negative_controls_fail(wl):
    for shape in wl.probe_shapes[1:4]:
        ins = wl.make_inputs(shape, 1)
        ctl = negative_controls(wl, ins, wl.reference(ins, shape), shape)
        assert all(c["rejected"] for c in ctl.values()), (shape, ctl)


# ---------------------------------------------------------------- stress table and references


def test_stress_table():
    from klineage.lineage.probe import probe_set, value_probes

    for name in NAMES:
        wl = _load(name)
        assert value_probes(wl) == ["equal_scores", "large_scores"]
        assert any(p.kind == "value" for p in probe_set(wl))
    wl = _load("attn_causal_b4_s1024")
    scope: dict = {}
    exec((HELDOUT / "attn_causal_b4_s1024" / "stress.py").read_text(), scope)
    shape = {"batch": 1, "heads": 2, "kv_heads": 2, "seq": 40}
    ins = wl.make_inputs(shape, 1)
    eq = scope["VALUE_PROBES"]["equal_scores"](ins, shape)
    ref = wl.reference(eq, shape)["out"]
    running_mean = ins["v"].double().cumsum(dim=2) / torch.arange(1, 41, dtype=torch.float64)[:, None]
    assert torch.allclose(ref, running_mean, rtol=1e-9, atol=1e-12)
    big = scope["VALUE_PROBES"]["large_scores"](ins, shape)
    assert big["q"].dtype == torch.float16 and torch.isfinite(big["q"]).all()
    assert torch.isfinite(wl.reference(big, shape)["out"]).all()


def test_vendor_names_a_missing_or_changed_flag_gems(wl):
    mod = wl.module
    try:
        import flag_gems  # noqa: F401
    except Exception:
        shape = wl.probe_shapes[1]
        with pytest.raises(RuntimeError, match="vendor_fallback"):
            wl.vendor(wl.make_inputs(shape, 1), shape)

    def flag_gems_5_0_2(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                        enable_gqa=False):
        return query

    def older(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
        return query

    assert mod.resolve_vendor(flag_gems_5_0_2) is flag_gems_5_0_2
    with pytest.raises(RuntimeError, match="enable_gqa"):
        mod.resolve_vendor(older)
    assert tuple(inspect.signature(flag_gems_5_0_2).parameters) == mod._VENDOR_PARAMS
    # an output of another dtype or shape is a changed API, never a timing
    shape = wl.probe_shapes[1]
    ins = wl.make_inputs(shape, 1)
    calls = []

    def fake(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        calls.append((is_causal, scale, enable_gqa, attn_mask, dropout_p))
        return query.float()

    old_fn = mod._vendor_fn
    try:
        mod._vendor_fn = fake
        with pytest.raises(RuntimeError, match="expected an fp16 tensor"):
            wl.vendor(ins, shape)
        assert calls == [(mod.CAUSAL, 1 / math.sqrt(D), mod.GQA, None, 0.0)]
        mod._vendor_fn = lambda query, key, value, **kw: torch.empty_like(query)
        assert wl.vendor(ins, shape)["out"].shape == (shape["batch"], shape["heads"], shape["seq"], D)
    finally:
        mod._vendor_fn = old_fn


# ---------------------------------------------------------------- the kernel with nvcc

DEFAULTS = {"ATTN_BLOCK_M": 128, "ATTN_BLOCK_N": 32, "ATTN_WARPS": 4, "ATTN_STAGES": 3}
# legal non-default points: 16-row warps with wide key tiles, 8 warps of 32 rows, 1 warp of 16 rows
POINTS = ({"ATTN_BLOCK_M": 64, "ATTN_BLOCK_N": 64, "ATTN_STAGES": 2},
          {"ATTN_WARPS": 8, "ATTN_BLOCK_M": 128, "ATTN_BLOCK_N": 128, "ATTN_STAGES": 2},
          {"ATTN_WARPS": 8, "ATTN_BLOCK_M": 256},
          {"ATTN_WARPS": 1, "ATTN_BLOCK_M": 16, "ATTN_BLOCK_N": 16, "ATTN_STAGES": 4})
ILLEGAL = (({"ATTN_BLOCK_M": 256}, "ATTN_BLOCK_M must be 16 or 32 rows per warp"),
           ({"ATTN_WARPS": 3, "ATTN_BLOCK_M": 96}, "ATTN_WARPS must be 1, 2, 4, 8 or 16"),
           ({"ATTN_BLOCK_N": 64}, "too many fp32 accumulators"),
           ({"ATTN_BLOCK_N": 40}, "ATTN_BLOCK_N must be a multiple of 16"),
           ({"ATTN_STAGES": 1}, "ATTN_STAGES must be in [2, 4]"),
           ({"ATTN_WARPS": 2, "ATTN_BLOCK_M": 32, "ATTN_BLOCK_N": 128}, "ATTN_BLOCK_N must be <= 32 * ATTN_WARPS"),
           ({"ATTN_WARPS": 8, "ATTN_BLOCK_M": 128, "ATTN_BLOCK_N": 128, "ATTN_STAGES": 4}, "exceeds 227 KB"))


def test_tunables_follow_the_sweep_convention():
    src = KERNEL.read_text()
    assert tunables(src) == DEFAULTS
    assert all(ROLES["tile"].search(n) for n in ("ATTN_BLOCK_M", "ATTN_BLOCK_N")) and ROLES["warps"].search("ATTN_WARPS")
    # the tile pair alone spans 3 x 3 configurations, fewer than MIN_GRID: the warp count joins
    assert sweep_points(src, [])[0] == {"ATTN_BLOCK_M": 128, "ATTN_BLOCK_N": 32, "ATTN_WARPS": 4}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from klineage.gate.compile import compile_kernel

    src = KERNEL.read_text()
    jobs = [{}] + list(POINTS) + [p for p, _ in ILLEGAL] + sweep_points(src, [])[1:]
    jobs = list({tuple(sorted(p.items())): p for p in jobs}.values())
    flags = lambda p: tuple(f"-D{k}={v}" for k, v in sorted(p.items()))  # noqa: E731
    cache = tmp_path_factory.mktemp("attn-builds")  # (a module fixture runs before conftest's isolated home)
    with ThreadPoolExecutor(max_workers=4) as ex:
        results = list(ex.map(lambda p: compile_kernel(src, extra_flags=flags(p), cache_dir=cache), jobs))
    return {tuple(sorted(p.items())): r for p, r in zip(jobs, results)}


@pytest.mark.nvcc
def test_kernel_compiles_at_its_default_without_spills(built):
    res = built[()]
    assert res.ok, res.log[-3000:]
    kernels = [r for r in res.resources if "attn_fwd_kernel" in r.name]
    assert len(kernels) == 2  # the cp.async kernel and the one for misaligned bases
    for r in kernels:
        assert r.spill_load_bytes == r.spill_store_bytes == 0 and r.stack_bytes == 0, r
        assert r.registers <= 255


@pytest.mark.nvcc
@pytest.mark.parametrize("point", POINTS, ids=lambda p: ",".join(f"{k[5:]}={v}" for k, v in sorted(p.items())))
def test_kernel_compiles_at_non_default_points_without_spills(built, point):
    res = built[tuple(sorted(point.items()))]
    assert res.ok, res.log[-3000:]
    assert not res.spills, [r for r in res.resources]


@pytest.mark.nvcc
@pytest.mark.parametrize("point,message", ILLEGAL, ids=lambda x: str(x)[:40])
def test_illegal_points_fail_with_their_reason(built, point, message):
    res = built[tuple(sorted(point.items()))]
    assert not res.ok and "static assertion failed" in res.log and message in res.log, res.log[-2000:]


@pytest.mark.nvcc
def test_every_sweep_point_builds_or_says_why_not(built):
    src = KERNEL.read_text()
    for p in sweep_points(src, [])[1:]:
        res = built[tuple(sorted(p.items()))]
        if not res.ok:
            errors = [ln for ln in res.log.splitlines() if "error" in ln and not re.search(r"\d+ errors? detected", ln)]
            assert errors and all("static assertion failed" in ln for ln in errors), (p, errors)
        else:
            assert not res.spills, p


# ---------------------------------------------------------------- GPU: the kernel against the oracle


def _run_case(wl, cand, shape, seed=7):
    from klineage.gate.worker import TORCH_DTYPES, place_inputs

    off = wl.pointer_offset(shape)
    fresh = wl.make_inputs(shape, seed, device="cuda")
    bufs = place_inputs(wl, shape, fresh)
    (dims, dtype), = wl.outputs(shape).values()
    n = math.prod(dims)
    guard = torch.full((off + n + 64,), float("nan"), dtype=TORCH_DTYPES[dtype], device="cuda")
    out = guard[off:off + n].view(dims)
    rc = cand.call({**bufs, "out": out}, wl.scalars(shape), torch.cuda.current_stream())
    torch.cuda.synchronize()
    if rc != 0:
        return [f"{shape}: cudaError {rc}"]
    problems = []
    c = compare(out, wl.reference(fresh, shape)["out"], wl.tolerance)
    if not c.ok:
        problems.append(f"{shape}: {c.reason}; first bad {c.first_bad_index}: {c.first_bad_value} vs "
                        f"{c.first_bad_expected}")
    if not (torch.isnan(guard[:off]).all() and torch.isnan(guard[off + n:]).all()):
        problems.append(f"{shape}: wrote outside the output")
    for k in wl.input_names:
        if not torch.equal(bufs[k], fresh[k]):
            problems.append(f"{shape} {k}: input modified")
    return problems


@pytest.mark.requires_cuda
@pytest.mark.nvcc
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("point", [{}] + list(POINTS), ids=lambda p: ",".join(f"{k[5:]}={v}" for k, v in
                                                                               sorted(p.items())) or "default")
def test_kernel_on_gpu(name, point):
    from klineage.gate.compile import compile_kernel
    from klineage.gate.worker import Candidate

    wl = _load(name)
    res = compile_kernel(KERNEL.read_text(), extra_flags=tuple(f"-D{k}={v}" for k, v in sorted(point.items())))
    assert res.ok, res.log[-3000:]
    cand = Candidate(res.so_path, wl)
    shapes = [s for k, s in wl.all_shapes() if k == "probe" or not point]  # non-default points: probes only
    problems = []
    for shape in shapes:
        problems += _run_case(wl, cand, dict(shape))
        torch.cuda.empty_cache()
    assert not problems, "\n".join(problems[:10])


@pytest.mark.requires_cuda
@pytest.mark.parametrize("name", NAMES)
def test_fallback_reference_matches_the_oracle_on_gpu(name):
    wl = _load(name)
    shape = wl.probe_shapes[5]
    ins = wl.make_inputs(shape, 3, device="cuda")
    out = wl.module.vendor_fallback(ins, shape)["out"]
    assert out.dtype == torch.float16
    assert compare(out, wl.reference(ins, shape)["out"], wl.tolerance).ok
