"""Admission never sees a held-out instance.

Admission (klineage.lineage.admit) decides which skills retrieval offers, by a roundtrip on kernels of
other workloads. Its targets are the mined workloads (the expert corpus) and apply_workloads/, where a
linear layer with bias and a row-wise log_softmax are written as targets of the matrix-product and
row-reduction families; never heldout/. Checked here: the target set the structural admission builds
holds no held-out workload or kernel, and admission refuses one; the shipped library's admission
records name none; every structural skill of the shipped library still has a target; and the two
admission workloads keep their contract (oracle, tolerance, negative controls, plain naive kernels).
"""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
import torch

from klineage.errors import InputError
from klineage.gate.correctness import compare, negative_controls
from klineage.gate.gate import kernel_hash
from klineage.gate.guard import check_source, strip_comments
from klineage.heldout import load_instances
from klineage.lineage import admit
from klineage.lineage.analyze import admission_workloads, check_not_heldout, heldout_fingerprint, run_admission
from klineage.mechanisms.forward import rewrite_for
from klineage.store import open_store
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
APPLY = ROOT / "apply_workloads"
ADMISSION = ("linear_bias", "log_softmax")


class _Built(Exception):
    pass


def _mined_targets(monkeypatch) -> dict[str, list]:
    """The targets run_admission builds for the shipped library under structural admission: each mined
    workload's start and lineage states, and the admission workloads' starts (caught where the run
    checks them, before any gate evaluation)."""
    import klineage.lineage.analyze as analyze
    store = open_store(ROOT / "skills_db" / "skills.duckdb")
    try:
        transitions, skills = store.transitions(), store.skills()
        sources = {}
        for t in transitions:
            for h in (t["simpler_hash"], t["richer_hash"]):
                k = store.get_kernel(h)
                sources[h] = k["source"] if k else None
    finally:
        store.close()
    workloads = {t["workload_name"]: load_workload(ROOT / "expert_kernels" / t["workload_name"]) for t in transitions}
    built: dict = {}
    gate = type("NoGate", (), {"config": None, "store": None, "compile_log": None})()

    def caught(targets, root=None):
        built.update(targets)
        raise _Built
    monkeypatch.setattr(analyze, "check_not_heldout", caught)
    with pytest.raises(_Built):
        run_admission(skills, transitions, sources.get, gate, workloads, analyze.Analysis(), rewrites="structural")
    return built


def test_admission_targets_hold_no_held_out_workload_or_kernel(monkeypatch):
    names, hashes, held = heldout_fingerprint()
    assert len(names) == 22 and hashes, "the held-out instances and their kernels are found"
    targets = _mined_targets(monkeypatch)
    monkeypatch.undo()
    assert set(ADMISSION) <= set(targets) and {"gemm", "row_sum", "cross_entropy"} <= set(targets)
    for name, tgts in targets.items():
        assert name not in names
        for t in tgts:
            assert kernel_hash(t.source) not in hashes, (name, t.origin)
            assert held not in Path(t.workload.path).resolve().parents, (name, t.workload.path)
    check_not_heldout(targets)  # and the run's own check agrees


def test_admission_refuses_a_held_out_target():
    inst = load_instances(ROOT / "heldout", names=["rmsnorm_8192x8192"])[0]
    by_folder = {inst.name: admit.candidate_kernels(inst.workload, [], [(inst.starts["naive"][1], "x")])}
    with pytest.raises(InputError, match="held-out"):
        check_not_heldout(by_folder)
    # a held-out kernel under another workload's name is refused too
    wl = load_workload(APPLY / "log_softmax")
    with pytest.raises(InputError, match="held-out"):
        check_not_heldout({"log_softmax": admit.candidate_kernels(wl, [], [(inst.starts["idiom"][1], "y")])})


def test_run_admission_stops_before_gating_a_held_out_target(monkeypatch):
    import klineage.lineage.analyze as analyze
    inst = load_instances(ROOT / "heldout", names=["mm_2048"])[0]
    monkeypatch.setattr(analyze, "admission_workloads",
                        lambda root=None: {inst.name: (inst.workload, [(inst.starts["idiom"][1], "heldout")])})

    class NoGate:
        config = store = compile_log = None

        def evaluate(self, *a, **kw):
            raise AssertionError("a held-out target was gated")
    with pytest.raises(InputError, match="held-out"):
        run_admission([], [], lambda h: None, NoGate(), {}, analyze.Analysis(), rewrites="structural")


def test_the_shipped_library_was_admitted_on_no_held_out_instance():
    """No admission trial of a shipped card, and no shipped evaluation record, names a held-out workload or
    kernel: there is nothing to drop."""
    names, hashes, _ = heldout_fingerprint()
    store = open_store(ROOT / "skills_db" / "skills.duckdb")
    try:
        skills = store.skills()
    finally:
        store.close()
    trials = [t for s in skills for t in (s["card"].get("admission") or {}).get("trials") or []]
    assert trials, "the shipped cards carry admission trials"
    for t in trials:
        assert t["workload"] not in names and t.get("base_hash") not in hashes and t.get("kernel_hash") not in hashes
    held_wl = {inst.workload.content_hash for inst in load_instances(ROOT / "heldout")}
    for f in sorted((ROOT / "skills_db" / "evaluations").glob("*.jsonl.gz")):
        with gzip.open(f, "rt") as fh:
            for line in fh:
                r = json.loads(line)
                assert r["workload_name"] not in names and r["workload_hash"] not in held_wl, f.name
                assert r["kernel_hash"] not in hashes, f.name


@pytest.mark.parametrize("mech,target", [("wgmma", "linear_bias"), ("block_per_row", "log_softmax"),
                                         ("register_cache", "log_softmax"), ("online_softmax", "log_softmax"),
                                         ("warp_reduction", "log_softmax")])
def test_structural_skills_of_the_held_out_families_have_a_target_without_them(mech, target):
    """The shipped structural skills whose only targets were held-out instances (the matrix product's
    ladder, the row reductions') reach the admission workloads along the shape rewriters' ladders."""
    store = open_store(ROOT / "skills_db" / "skills.duckdb")
    try:
        card = admit.as_card(next(s["card"] for s in store.skills() if s["mechanism"] == mech))
    finally:
        store.close()
    wl, starts = admission_workloads()[target]
    assert target not in {c.workload for c in card.effects.per_case}
    requires = sorted({r[1] for r in card.requires})
    for tgt in admit._targets_of(admit.candidate_kernels(wl, [], starts), mech):
        if rewrite_for(mech, tgt.source, requires, None, card=card, workload=wl) is not None:
            return
    pytest.fail(f"no kernel of {target} takes {mech}")


# ---------------------------------------------------------------- the two admission workloads


@pytest.fixture(params=ADMISSION)
def wl(request):
    return load_workload(APPLY / request.param)


def test_admission_workloads_are_new_operators(wl):
    names, hashes, _ = heldout_fingerprint()
    corpus = {load_workload(d).name for d in (ROOT / "expert_kernels").iterdir() if (d / "workload.py").is_file()}
    assert wl.name not in names | corpus and wl.entry == wl.name
    assert wl.family == {"linear_bias": "gemm", "log_softmax": "reduction"}[wl.name]
    src = (APPLY / wl.name / "naive.cu").read_text()
    assert kernel_hash(src) not in hashes
    held_ops = {load_instances(ROOT / "heldout", names=[n])[0].workload.entry for n in names}
    assert wl.entry not in held_ops  # mm, addmm, bmm, grouped_mm, attention_fwd, rmsnorm, ...


SMALL = {"linear_bias": [{"M": 5, "N": 7, "K": 11}, {"M": 64, "N": 96, "K": 200}, {"M": 128, "N": 256, "K": 1024}],
         "log_softmax": [{"rows": 3, "cols": 5}, {"rows": 17, "cols": 1023}, {"rows": 64, "cols": 4099}]}


def test_reference_is_the_float64_formula(wl):
    for s in SMALL[wl.name][:2]:
        inputs = wl.make_inputs(s, seed=3)
        ref = wl.reference(inputs, s)["out"]
        assert ref.dtype == torch.float64
        if wl.name == "linear_bias":
            x, w, b = (inputs[k].double() for k in ("x", "weight", "bias"))
            for i in range(s["M"]):
                for j in range(s["N"]):
                    want = sum(float(x[i, k]) * float(w[j, k]) for k in range(s["K"])) + float(b[j])
                    assert abs(ref[i, j].item() - want) <= 1e-9 * max(1.0, abs(want))
        else:
            x = inputs["x"].double()
            for r in range(s["rows"]):
                m = max(float(v) for v in x[r])
                norm = m + torch.log(torch.exp(x[r] - m).sum()).item()
                for c in range(s["cols"]):
                    assert abs(ref[r, c].item() - (float(x[r, c]) - norm)) <= 1e-9 * max(1.0, abs(norm))


def _bad_variants(wl, inputs, s) -> dict:
    if wl.name == "linear_bias":
        x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
        acc = torch.zeros(s["M"], s["N"], dtype=torch.bfloat16)
        for k in range(s["K"]):  # every partial sum rounded to bf16
            acc = (acc.float() + x[:, k:k + 1].float() * w[:, k].float()[None, :]).to(torch.bfloat16)
        return {"no_bias": (x.float() @ w.float().t()).to(torch.bfloat16),
                "bf16_accumulation": (acc.float() + b.float()).to(torch.bfloat16),
                "bias_reversed": (x.float() @ w.float().t() + b.float().flip(0)).to(torch.bfloat16)}
    x = inputs["x"].float()
    m = x.max(1, keepdim=True).values
    norm = m + torch.log(torch.exp(x - m).sum(1, keepdim=True))
    return {"no_max_shift": (x - torch.log(torch.exp(x).sum(1, keepdim=True))).to(torch.bfloat16),
            "softmax": torch.softmax(x, 1).to(torch.bfloat16),
            "normaliser_without_max": (x - (norm - m)).to(torch.bfloat16),
            "no_normaliser": (x - m).to(torch.bfloat16)}


def test_vendor_and_fp32_pass_shortcuts_and_negative_controls_fail(wl):
    for s in SMALL[wl.name]:
        for seed in (1, 2):
            inputs = wl.make_inputs(s, seed)
            refs = wl.reference(inputs, s)
            vend = wl.vendor(inputs, s)["out"]
            c = compare(vend, refs["out"], wl.tolerance)
            assert c.ok, (s, seed, c.reason)
            controls = negative_controls(wl, inputs, refs, s)
            assert controls["zeros"]["rejected"] and controls["copy_of_input"]["rejected"], controls
            if _big(wl, s):
                for k, out in _bad_variants(wl, inputs, s).items():
                    assert not compare(out, refs["out"], wl.tolerance).ok, (k, s, seed)


def _big(wl, s) -> bool:
    return (s.get("K", 0) >= 200) if wl.name == "linear_bias" else s["cols"] >= 1023


def test_probe_shapes_stress_the_kernels_assumptions(wl):
    probes = [dict(s) for s in wl.probe_shapes]
    assert {1, 3} <= {wl.pointer_offset(s) for s in probes}, "bases 1 and 3 elements past alignment"
    width = "K" if wl.name == "linear_bias" else "cols"
    assert any(s[width] % 8 for s in probes) and min(s[width] for s in probes) == 1


@pytest.mark.parametrize("name", ADMISSION)
def test_naive_kernel_is_plain_and_keeps_the_abi(name):
    from klineage.mechanisms import detect_all
    wl = load_workload(APPLY / name)
    src = (APPLY / name / "naive.cu").read_text()
    code = strip_comments(src)[0]
    flat = " ".join(src.split())
    assert flat.count(wl.c_signature) == 1 and len(re.findall(r"__global__", code)) == 1
    assert "return cudaGetLastError();" in code and "long long" in code
    assert re.search(r"// ---- tuning constants \(override with -DNAME=value\) ----", src)
    assert not re.search(r"__shared__|__shfl|__restrict__|#pragma|asm\s*\(|float4|__nv_bfloat162", code)
    assert check_source(src, wl).ok
    assert [f.mechanism for f in detect_all(src)] == []


@pytest.mark.nvcc
@pytest.mark.parametrize("name", ADMISSION)
def test_naive_kernel_compiles_without_spills(name):
    from klineage.gate.compile import compile_kernel
    res = compile_kernel((APPLY / name / "naive.cu").read_text())
    assert res.ok, res.log
    assert not res.spills and res.resources[0].shared_bytes == 0
