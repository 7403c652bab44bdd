"""The style-gallery ladders (style_gallery/ladders/): each is a workload folder that follows the
contract with a truth.toml beside it, `klineage mine --dry-run` walks at least 80% of the rungs of
each of the first three ladders (compound and peeled steps count; the walk of all seven, gated on
the GPU, is scored by benchmarks/gallery_walk_labels.py), and the rules walk of each gallery expert
goes past its first structural mechanism a rule removes. The rungs it does not walk are listed with
the reason."""
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from klineage.cli import main
from klineage.lineage.proposers import ladder_from_folder
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[1]
GALLERY = ROOT / "style_gallery" / "ladders"
LADDERS = sorted(p for p in GALLERY.iterdir() if (p / "workload.py").is_file())
FIRST = [GALLERY / n for n in ("layernorm_cg", "reduce_blocks", "softmax_online")]
# families past the annotations: the structural ones a rule can still remove
STRUCTURAL_RULES = {"coarsening", "smem_padding", "vector_access", "warp_reduction", "smem_staging"}


def test_there_are_seven_ladders_each_a_workload_folder():
    assert [p.name for p in LADDERS] == ["layernorm_cg", "layernorm_rows", "reduce_blocks", "rowsum_blocks",
                                         "sgemm_worklog", "softmax_online", "softmax_rows"]
    for d in LADDERS:
        wl = load_workload(d)
        ladder = ladder_from_folder(d)
        assert len(ladder) >= 6 and (d / "versions" / "ladder.toml").is_file() and (d / "truth.toml").is_file()
        # the oracle and the vendor agree on a small probe shape (the contract's two references)
        shape = next(s for s in wl.probe_shapes if "offset" not in s and not wl.outside_domain(s))
        inputs = wl.make_inputs(shape, 1)
        ref, ven = wl.reference(inputs, shape), wl.vendor(inputs, shape)
        for k in ref:
            assert torch.allclose(ref[k].float(), ven[k].float(), rtol=1e-4, atol=1e-5), (d.name, k)


def test_the_gallery_covers_the_habits_it_claims():
    ln, rb, sm = FIRST
    assert load_workload(ln).domain and load_workload(rb).launch
    text = {d.name: "\n".join(p.read_text() for p in d.rglob("*.cu")) for d in (ln, rb, sm)}
    assert "cg::reduce" in text["layernorm_cg"] and "ln10.cu" in {p.name for p in (ln / "versions").iterdir()}
    assert "__restrict x" in text["softmax_online"] and "warpReduceMax" in text["softmax_online"]
    assert "extern __shared__" in text["reduce_blocks"] and "template <unsigned int blockSize>" in text["reduce_blocks"]
    tomls = {d.name: (d / "versions" / "ladder.toml").read_text() for d in (ln, rb, sm)}
    assert "[from]" in tomls["softmax_online"] and "[from]" in tomls["reduce_blocks"]
    # the later four: a restart, a bundled step, a wrong header, three identical loci, the missed forms
    rows, lrows, gemm, rsum = (GALLERY / n for n in ("softmax_rows", "layernorm_rows", "sgemm_worklog", "rowsum_blocks"))
    assert '[from]' in (rows / "versions" / "ladder.toml").read_text()
    assert '["vector_access", "fast_math"]' in (rows / "versions" / "ladder.toml").read_text()
    assert "mechanism=unroll" in (lrows / "versions" / "ex6_unroll.cu").read_text()
    assert (lrows / "versions" / "ex3_ldg.cu").read_text().count("__ldg(xr + c)") == 3
    assert "maxval_prev" in (rows / "versions" / "softmax_forward5.cu").read_text()
    assert "reduce_md_op" in (rows / "versions" / "softmax_forward5.cu").read_text()
    assert "if (blockSize >= 512)" in (rsum / "versions" / "row_sum2.cu").read_text()
    assert "#pragma unroll" not in (rsum / "versions" / "row_sum2.cu").read_text()
    expert = (gemm / "expert.cu").read_text()
    assert "AS_STRIDE = BM + 4" in expert and "smem[2 * STAGE]" in expert and "outer_product<TM, TN>" in expert


def _dry(args: list[str]) -> dict:
    r = CliRunner().invoke(main, ["mine", *args, "--dry-run", "--json", "--quiet"])
    assert r.exit_code == 0, r.output[-3000:]
    return {l["workload"]: l for l in json.loads(r.output)["lineages"]}


@pytest.mark.nvcc
def test_the_dry_run_walks_at_least_80_percent_of_each_of_the_first_ladders():
    lins = _dry([str(d) for d in FIRST] + ["--proposer", "versions"])
    assert set(lins) == {d.name for d in FIRST}
    for name, lin in lins.items():
        r = lin["rungs"]
        assert r["fraction"] >= 0.8, (name, r)
        assert r["total"] - r["walked"] == len(r["not_walked"]) and all(m["reason"] for m in r["not_walked"])
    # the side branches are off the chain by design: a restart, and a detour that drops a mechanism
    assert {m["rung"] for m in lins["softmax_online"]["rungs"]["not_walked"]} == {"softmax_v6"}
    assert {m["rung"] for m in lins["reduce_blocks"]["rungs"]["not_walked"]} == {"reduce7"}
    # bundled rungs: the extras came off by their rules, each a step of its own
    peeled = [p for p in lins["layernorm_cg"]["proposals"] if p["verdict"] == "accepted" and p["locus"][:8] != "version:"]
    assert {p["mechanism"] for p in peeled} >= {"coarsening", "launch_bounds", "fast_math"}


def test_the_rules_walk_of_every_gallery_expert_goes_past_its_first_structural_mechanism():
    """Walked with every candidate passing (the gate scripted; the nvcc dry run of the versions walk
    above builds the same kinds of kernels): the walk's own proposals and audit decide."""
    from klineage.lineage.proposers import RulesProposer
    from klineage.lineage.walk import Walker
    from tests.lineage.test_walk import ScriptedGate
    for d in LADDERS:
        lin = Walker(ScriptedGate(), load_workload(d), [RulesProposer()]).run((d / "expert.cu").read_text())
        done = {t["mechanism"] for t in lin["transitions"]}
        assert done & STRUCTURAL_RULES, (d.name, done)
        if "__restrict" in (d / "expert.cu").read_text():
            assert "restrict" in done  # the author's restrict style comes off and goes back byte for byte
            assert all(t["rederived_identical"] for t in lin["transitions"] if t["mechanism"] == "restrict")
