"""Loci keep their identity across a step: removing the first of identical loci leaves the others
themselves, although the detector numbers them anew. Walked with a scripted gate (a test double; no
figure here is a measurement)."""
from pathlib import Path

from klineage.gate.gate import kernel_hash
from klineage.lineage.proposers import RulesProposer, make_proposer
from klineage.lineage.walk import Limits, Walker
from klineage.mechanisms import detect_all
from klineage.mechanisms.audit import audit_rules, match_features
from klineage.workload import load_workload
from tests.lineage.test_ladder import WORKLOAD
from tests.lineage.test_walk import ScriptedGate

LOOP = """    for (int c = threadIdx.x; c < n; c += blockDim.x) {{
        float v = {load};
        {use}
    }}
"""
USES = ("m = fmaxf(m, v);", "s += expf(v - m);", "y[c] = expf(v - m) / s;")


def rowwise(hinted: bool = True) -> str:
    """Three passes over a row, each reading it by the same statement text."""
    load = "__ldg(xr + c)" if hinted else "xr[c]"
    loops = "".join(LOOP.format(load=load, use=u) + ("    __syncthreads();\n" if i < 2 else "")
                    for i, u in enumerate(USES))
    return ("#include <cuda_runtime.h>\n\n"
            "__global__ void scale_exp_kernel(const float* x, float* y, int n) {\n"
            "    const float* xr = x;\n    float m = -1e30f, s = 0.0f;\n" + loops + "}\n\n"
            'extern "C" cudaError_t scale_exp(const float* x, float* y, int n, cudaStream_t stream) {\n'
            "    scale_exp_kernel<<<1, 256, 0, stream>>>(x, y, n);\n    return cudaGetLastError();\n}\n")


def workload(tmp_path: Path) -> Path:
    d = tmp_path / "wl"
    (d / "versions").mkdir(parents=True)
    (d / "workload.py").write_text(WORKLOAD)
    return d


def test_removing_the_first_of_identical_loci_leaves_the_others_themselves():
    before = detect_all(rowwise())
    hints = [f for f in before if f.mechanism == "cache_hint"]
    assert [f.locus for f in hints] == [f"scale_exp_kernel:__ldg:xr + c#{i}" for i in (1, 2, 3)]
    first = next(p for p in RulesProposer().propose(rowwise(), before, set()) if not isinstance(p, tuple))
    assert first.locus.endswith("#1")
    after = detect_all(first.source)
    # the detector names the two left #1 and #2: they are the old #2 and #3, at their places
    gone, came, renamed = match_features(before, after)
    assert gone == {("cache_hint", "scale_exp_kernel:__ldg:xr + c#1")} and not came
    assert renamed == [[["cache_hint", "scale_exp_kernel:__ldg:xr + c#2"], ["cache_hint", "scale_exp_kernel:__ldg:xr + c#1"]],
                       [["cache_hint", "scale_exp_kernel:__ldg:xr + c#3"], ["cache_hint", "scale_exp_kernel:__ldg:xr + c#2"]]]
    audit = audit_rules(before, after, first.mechanism, first.locus)
    assert audit["ok"], audit["reason"]


def test_the_rules_walk_takes_every_identical_locus_off(tmp_path):
    wl = load_workload(workload(tmp_path))
    lin = Walker(ScriptedGate(), wl, [RulesProposer()], Limits()).run(rowwise())
    hints = [t for t in lin["transitions"] if t["mechanism"] == "cache_hint"]
    assert len(hints) == 3 and lin["termination"] == "complete", lin["rejections"]
    assert not [r for r in lin["rejections"] if r["kind"] == "audit"]
    assert all(t["rederived_identical"] for t in hints)


def test_rules_loci_by_occurrence_refuses_the_first_of_identical_loci(tmp_path):
    """[walk] rules_loci = "occurrence": removing the first of three identical hints reads as the third
    removed, and the audit refuses it; only the last is ever taken off by its number."""
    before = detect_all(rowwise())
    first = next(p for p in RulesProposer().propose(rowwise(), before, set()) if not isinstance(p, tuple))
    audit = audit_rules(before, detect_all(first.source), first.mechanism, first.locus, loci="occurrence")
    assert not audit["ok"] and "c#3" in str(audit["removed"]), audit
    wl = load_workload(workload(tmp_path))
    lin = Walker(ScriptedGate(), wl, [RulesProposer()], Limits(), rules_loci="occurrence").run(rowwise())
    refused = [r for r in lin["rejections"] if r["kind"] == "audit" and r["mechanism"] == "cache_hint"]
    assert refused and all(not r["locus"].endswith("#3") for r in refused), lin["rejections"]


def test_a_mining_configuration_names_how_the_rules_audit_matches_loci(tmp_path):
    from klineage.lineage.mine import MineConfigError, load_config
    root = Path(__file__).resolve().parents[2]
    run, _ = load_config(root / "pipelines" / "mine.toml")
    assert run.rules_loci == "occurrence"
    bad = tmp_path / "m.toml"
    bad.write_text((root / "pipelines" / "mine.toml").read_text().replace('rules_loci = "occurrence"',
                                                                          'rules_loci = "by_number"'))
    try:
        load_config(bad)
    except MineConfigError as e:
        assert "rules_loci" in str(e) and "occurrence" in str(e)
    else:
        raise AssertionError("an unknown rules_loci was accepted")


def test_the_versions_walk_peels_identical_loci_instead_of_lifting_a_compound(tmp_path):
    # one rung: the expert adds a block per row (declared, no detector sees it) and three hinted loads
    d = workload(tmp_path)
    (d / "naive.cu").write_text(rowwise(hinted=False).replace("scale_exp_kernel<<<1, 256", "scale_exp_kernel<<<1, 1"))
    (d / "expert.cu").write_text(rowwise())
    (d / "versions" / "v1.cu").write_text(rowwise(hinted=False).replace("scale_exp_kernel<<<1, 256",
                                                                         "scale_exp_kernel<<<1, 1"))
    (d / "versions" / "ladder.toml").write_text('expert_adds = "block_per_row"\n')
    prop = make_proposer("versions", d)
    lin = Walker(ScriptedGate(), load_workload(d), [prop], Limits()).run(prop.top.source)
    mechs = [t["mechanism"] for t in lin["transitions"]]
    assert mechs.count("cache_hint") == 3 and "block_per_row" in mechs, (mechs, lin["rejections"])
    assert not any("+" in m for m in mechs)
    assert kernel_hash(prop.ladder[0].source) in {s["kernel_hash"] for s in lin["states"]}
