"""Ladders as authors write them (klineage/lineage/ladder.py): declarations in headers or ladder.toml,
names checked before anything is built, rungs ordered by what they hold rather than by file number,
bundled rungs as compound steps (or separate steps where the rules peel the extras), refused rungs
recorded while the walk goes on, rungs off the chain recorded with the reason. Walked with a scripted
gate (a test double; no figure here is a measurement)."""
from pathlib import Path

import pytest

from klineage.gate.gate import Status, kernel_hash
from klineage.lineage.ladder import ProposerError, RungOrder, declared_mechanisms, ladder_from_folder, natural_key
from klineage.mechanisms.audit import audit_ladder_step
from klineage.lineage.proposers import make_proposer
from klineage.lineage.walk import Limits, Walker
from klineage.mechanisms import detect_all
from klineage.workload import load_workload
from tests.lineage.test_walk import ScriptedGate

WORKLOAD = '''
import torch
NAME = "scale_exp"
FAMILY = "elementwise"
DTYPES = ("float32",)
ENTRY = "scale_exp"
ARGS = [{"name": "x", "kind": "ptr", "dtype": "float32", "role": "in"},
        {"name": "y", "kind": "ptr", "dtype": "float32", "role": "out"},
        {"name": "n", "kind": "int"}]
BENCHMARK_CASES = [{"n": 4096}]
PROBE_SHAPES = [{"n": 7}]
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4, "min_matched": 0.999}
VENDOR_NAME = "torch"
def make_inputs(shape, seed, device="cpu"):
    return {"x": torch.rand(shape["n"], device=device)}
def outputs(shape): return {"y": ((shape["n"],), "float32")}
def scalars(shape): return {"n": shape["n"]}
def reference(inputs, shape): return {"y": 4 * torch.exp(inputs["x"].double())}
def vendor(inputs, shape): return {"y": 4 * torch.exp(inputs["x"])}
def bytes_moved(shape): return 8 * shape["n"]
def flops(shape): return 8 * shape["n"]
'''


def kernel(*mechs: str, note: str = "") -> str:
    """A small kernel holding the named mechanisms (restrict, launch_bounds, unroll, fast_math, cache_hint)."""
    q = " __restrict__" if "restrict" in mechs else ""
    lb = "__launch_bounds__(256) " if "launch_bounds" in mechs else ""
    pragma = "    #pragma unroll\n" if "unroll" in mechs else ""
    load = "__ldg(x + i)" if "cache_hint" in mechs else "x[i]"
    exp = "__expf" if "fast_math" in mechs else "expf"
    return (f"// {note}\n#include <cuda_runtime.h>\n\n"
            f"__global__ void {lb}scale_exp_kernel(const float*{q} x, float*{q} y, int n) {{\n"
            f"    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"    if (i >= n) return;\n"
            f"    float acc = 0.0f;\n"
            f"{pragma}    for (int k = 0; k < 4; ++k) acc += {exp}({load});\n"
            f"    y[i] = acc;\n}}\n\n"
            f'extern "C" cudaError_t scale_exp(const float* x, float* y, int n, cudaStream_t stream) {{\n'
            f"    scale_exp_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);\n"
            f"    return cudaGetLastError();\n}}\n")


def make_ladder(root: Path, rungs: dict[str, str], naive: str, expert: str, toml: str = "") -> Path:
    d = root / "wl"
    (d / "versions").mkdir(parents=True)
    (d / "workload.py").write_text(WORKLOAD)
    (d / "naive.cu").write_text(naive)
    (d / "expert.cu").write_text(expert)
    for name, text in rungs.items():
        (d / "versions" / name).write_text(text)
    if toml:
        (d / "versions" / "ladder.toml").write_text(toml)
    return d


def walk(d: Path, gate=None, limits=Limits()):
    prop = make_proposer("versions", d)
    lin = Walker(gate or ScriptedGate(), load_workload(d), [prop], limits).run(prop.top.source, origin="expert.cu")
    labels = {kernel_hash(v.source): v.label for v in prop.ladder}
    return lin, [labels.get(s["kernel_hash"], "~") for s in lin["states"]]


# ------------------------------------------------------------------------------------ declarations
def test_declarations_come_from_headers_or_ladder_toml(tmp_path):
    assert declared_mechanisms("// klineage-step: mechanism=vector_access, warp_reduction\n") == \
        ("vector_access", "warp_reduction")
    assert declared_mechanisms("// klineage-step: mechanism=a+b\n") == ("a", "b")
    assert sorted(["v10.cu", "v2.cu", "v1.cu"], key=natural_key) == ["v1.cu", "v2.cu", "v10.cu"]
    d = make_ladder(tmp_path, {"v1.cu": "// klineage-step: mechanism=restrict\n" + kernel("restrict"),
                               "v10.cu": kernel("restrict", "unroll", "fast_math"),
                               "v2.cu": kernel("restrict", "unroll")},
                    kernel(), kernel("restrict", "unroll", "fast_math", "launch_bounds"),
                    'expert_adds = ["launch_bounds"]\n[steps]\n"v2.cu" = "unroll"\n"v10" = ["fast_math"]\n')
    ladder = ladder_from_folder(d)
    assert [v.label for v in ladder] == ["naive", "v1", "v2", "v10", "expert"]
    assert [v.mechanisms for v in ladder] == [(), ("restrict",), ("unroll",), ("fast_math",), ("launch_bounds",)]


@pytest.mark.parametrize("toml,header,match", [
    ("", "// klineage-step: mechanism=warp_reducton\n", r"'warp_reducton'.*did you mean warp_reduction\?.*structural"),
    ('[steps]\n"v1.cu" = "smem_tiling"\n', "", r"'smem_tiling'.*add it to structural = \[\.\.\.\]"),
    ('[steps]\n"v9.cu" = "unroll"\n', "", r"steps names 'v9.cu', which is not a rung"),
    ('[from]\n"v1.cu" = "expert.cu"\n', "", r"its own ancestor"),
    ('[steps]\n"v1.cu" = "unroll"\n', "// klineage-step: mechanism=restrict\n", r"keep one of the two"),
    ('surprise = 1\n', "", r"unknown key 'surprise'"),
])
def test_a_bad_declaration_is_one_line_naming_the_fix(tmp_path, toml, header, match):
    d = make_ladder(tmp_path, {"v1.cu": header + kernel("restrict")}, kernel(), kernel("restrict", "unroll"), toml)
    with pytest.raises(ProposerError, match=match) as e:
        make_proposer("versions", d)
    assert "\n" not in str(e.value) and e.value.exit_code == 2


def test_a_name_declared_structural_is_accepted(tmp_path):
    d = make_ladder(tmp_path, {"v1.cu": "// klineage-step: mechanism=smem_tiling\n" + kernel(note="tiled")},
                    kernel(), kernel("unroll"), 'structural = ["smem_tiling"]\n')
    lin, chain = walk(d)
    assert chain == ["expert", "v1", "naive"] and lin["termination"] == "complete"
    assert [t["mechanism"] for t in lin["transitions"]] == ["unroll", "smem_tiling"]


# ------------------------------------------------------------------------------------ the walk
def test_numbering_is_not_the_order_and_a_bundled_rung_is_peeled_by_the_rules(tmp_path):
    # v3 holds less than v2 (numbered late, written early); v2 adds unroll and fast_math in one commit
    rungs = {"v1.cu": kernel("restrict"), "v2.cu": kernel("restrict", "cache_hint", "unroll", "fast_math"),
             "v3.cu": kernel("restrict", "cache_hint")}
    d = make_ladder(tmp_path, rungs, kernel(), kernel("restrict", "cache_hint", "unroll", "fast_math", "launch_bounds"),
                    '[steps]\n"v2.cu" = "unroll"\n"v3.cu" = "cache_hint"\n')
    lin, chain = walk(d)
    assert [c for c in chain if c != "~"] == ["expert", "v2", "v3", "v1", "naive"]
    steps = [(t["proposer"], t["mechanism"], t["declared"]) for t in lin["transitions"]]
    # fast_math (undeclared) comes off v2 by its rule first; the ladder step then names unroll alone
    assert steps == [("versions", "launch_bounds", True), ("versions", "fast_math", False),
                     ("versions", "unroll", True), ("versions", "cache_hint", True), ("versions", "restrict", True)]
    assert lin["termination"] == "complete" and not lin["rejections"]


def test_a_bundled_rung_no_rule_can_split_is_one_compound_step(tmp_path):
    d = make_ladder(tmp_path, {"v1.cu": kernel("restrict")}, kernel(),
                    kernel("restrict", "unroll", "fast_math"), 'expert_adds = ["warp_per_row"]\n')

    class NoPeel:  # the same ladder, with the rules unable to remove anything
        def propose(self, *a):
            return iter(())
    prop = make_proposer("versions", d)
    prop.rules = NoPeel()
    lin = Walker(ScriptedGate(), load_workload(d), [prop], Limits()).run(prop.top.source)
    first = lin["transitions"][0]
    assert first["mechanism"] == "fast_math+unroll+warp_per_row"
    assert first["mechanisms"] == ["fast_math", "unroll", "warp_per_row"]
    assert first["audit"]["undeclared"] == ["fast_math", "unroll"] and first["audit"]["structural"] == ["warp_per_row"]


def test_a_refused_rung_is_recorded_and_the_walk_goes_past_it(tmp_path):
    rungs = {"v1.cu": kernel("restrict"), "v2.cu": kernel("restrict", "unroll", note="wrong on ragged sizes"),
             "v3.cu": kernel("restrict", "unroll", "fast_math")}
    d = make_ladder(tmp_path, rungs, kernel(), kernel("restrict", "unroll", "fast_math", "launch_bounds"),
                    'expert_adds = "launch_bounds"\n'
                    '[steps]\n"v1.cu" = "restrict"\n"v2.cu" = "unroll"\n"v3.cu" = "fast_math"\n')
    bad = kernel_hash((d / "versions" / "v2.cu").read_text())
    gate = ScriptedGate(verdict=lambda s: Status.INCORRECT if kernel_hash(s) == bad else Status.PASSED)
    lin, chain = walk(d, gate)
    (rej,) = [r for r in lin["rejections"] if r["kind"] == "incorrect"]
    assert rej["rung"] == "v2" and rej["locus"] == "version:v3"
    assert [c for c in chain if c != "~"] == ["expert", "v3", "v1", "naive"]
    assert any(t["config"] == {"version": "v3", "previous": "v1"} for t in lin["transitions"])
    (off,) = [r for r in lin["rejections"] if r["kind"] == "not_on_chain"]
    assert off["rung"] == "v2" and "refused" in off["message"]
    assert lin["termination"] == "complete"


def test_a_restart_and_a_dropped_mechanism_are_off_the_chain_with_reasons(tmp_path):
    rungs = {"v1.cu": kernel("restrict"), "v2.cu": kernel("restrict", "unroll"),
             "v3.cu": kernel("restrict", "unroll", "cache_hint", note="tried the read-only path"),
             "v4.cu": kernel("restrict", "unroll", "fast_math", note="dropped __ldg again"),
             "v5.cu": kernel("restrict", note="restart from v1: a warp per row")}
    d = make_ladder(tmp_path, rungs, kernel(), kernel("restrict", "unroll", "fast_math", "launch_bounds"),
                    'structural = ["warp_row"]\n[steps]\n"v3.cu" = "cache_hint"\n"v4.cu" = "fast_math"\n'
                    '"v5.cu" = "warp_row"\n[from]\n"v5.cu" = "v1.cu"\n"v4.cu" = "v3.cu"\n"expert.cu" = "v4.cu"\n')
    lin, chain = walk(d)
    assert [c for c in chain if c != "~"] == ["expert", "v4", "v2", "v1", "naive"]
    off = {r["rung"]: r["message"] for r in lin["rejections"] if r["kind"] == "not_on_chain"}
    assert set(off) == {"v3", "v5"}
    assert "cache_hint" in off["v3"] and "warp_row" in off["v5"]
    # v4 -> v2 is declared fast_math; v3's cache_hint, which v4 dropped, does not count against it
    step = next(t for t in lin["transitions"] if t["config"].get("version") == "v4")
    assert step["mechanism"] == "fast_math" and step["audit"]["ok"]


def test_a_declaration_the_evidence_does_not_see_shows_both_and_the_walk_goes_on(tmp_path):
    # the expert declares a warp reduction it does not hold (a comment names cg::reduce); v1 is the same
    # kernel: expert -> v1 adds nothing and is refused, naming the declaration and the evidence; expert
    # -> naive adds restrict, which is what the step is labelled, the declaration shown beside it
    d = make_ladder(tmp_path, {"v1.cu": kernel("restrict")}, kernel(), kernel("restrict", note="cg::reduce"),
                    'expert_adds = "warp_reduction"\n')
    lin, chain = walk(d)
    assert chain == ["expert", "naive"] and lin["termination"] == "complete"
    (refused,) = [r for r in lin["rejections"] if r["kind"] == "audit"]
    assert refused["rung"] == "v1"
    assert "declared ['warp_reduction'], but the evidence does not see it added: warp_reduction in the richer " \
           "rung at none, in the simpler at none" in refused["message"] and "adds nothing" in refused["message"]
    (step,) = lin["transitions"]
    assert step["mechanism"] == "restrict" and step["audit"]["unseen"] == ["warp_reduction"]
    assert "declared ['warp_reduction']" in step["audit"]["disagrees"]
    assert "the evidence sees ['restrict'] added" in step["audit"]["disagrees"]


def test_dropping_a_true_declaration_walks_no_further_than_keeping_it(tmp_path):
    # v2 declares what the evidence cannot see (its change is a comment here: a detector miss, for the
    # walk); keeping or dropping that declaration walks the same steps with the same labels
    rungs = {"v1.cu": kernel("restrict"), "v2.cu": kernel("restrict", note="eight items per thread")}
    lins = {}
    for name, steps in (("kept", '"v2.cu" = "coarsening"\n'), ("dropped", "")):
        toml = 'expert_adds = "fast_math"\n[steps]\n"v1.cu" = "restrict"\n' + steps
        d = make_ladder(tmp_path / name, rungs, kernel(), kernel("restrict", "fast_math"), toml)
        lins[name] = walk(d)
    (lin_k, chain_k), (lin_d, chain_d) = lins["kept"], lins["dropped"]
    assert chain_k == chain_d == ["expert", "v2", "naive"]
    assert [t["mechanism"] for t in lin_k["transitions"]] == [t["mechanism"] for t in lin_d["transitions"]] == \
        ["fast_math", "restrict"]
    assert lin_k["termination"] == lin_d["termination"] == "complete"


def test_a_form_seen_only_in_the_top_does_not_put_rungs_off_the_order(tmp_path):
    # the expert reduces with cooperative groups (a form the rules do not take: seen only); the rung
    # below it holds a shuffle loop. Both hold a warp reduction, so the rung lies below the expert
    shuffle = kernel("restrict").replace(
        "    y[i] = acc;\n",
        "    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);\n    y[i] = acc;\n")
    cg = ("#include <cooperative_groups.h>\n#include <cooperative_groups/reduce.h>\nnamespace cg = cooperative_groups;\n"
          + kernel("restrict", "fast_math").replace(
              "    y[i] = acc;\n",
              "    acc = cg::reduce(cg::tiled_partition<32>(cg::this_thread_block()), acc, cg::plus<float>());\n"
              "    y[i] = acc;\n"))
    d = make_ladder(tmp_path, {"v1.cu": kernel("restrict"), "v2.cu": shuffle}, kernel(), cg,
                    '[steps]\n"v2.cu" = "warp_reduction"\n')
    prop = make_proposer("versions", d)
    top = len(prop.ladder) - 1
    assert "warp_reduction" in prop.order.kinds[top] and prop.order.below(2, top)
    lin, chain = walk(d)
    assert chain == ["expert", "v2", "v1", "naive"]
    assert not [r for r in lin["rejections"] if r["kind"] == "not_on_chain"]


def test_the_order_is_by_what_rungs_hold():
    feats = [detect_all(kernel(*m)) for m in [(), ("restrict", "unroll"), ("restrict",), ("restrict", "unroll", "fast_math")]]
    order = RungOrder(feats)
    assert order.below(2, 1) and not order.below(1, 2) and order.below(0, 2)
    assert order.candidates(3) == [1, 2, 0]
    held = [frozenset(), frozenset({"block_row"}), frozenset({"warp_row"}), frozenset({"warp_row"})]
    order = RungOrder(feats, held)
    assert not order.below(1, 3) and order.candidates(3) == [2, 0]


def test_ladder_audit_names_every_mechanism_a_step_adds():
    rich, simple = detect_all(kernel("restrict", "unroll", "fast_math")), detect_all(kernel("restrict"))
    audit, mechs = audit_ladder_step(rich, simple, ("unroll",), {"unroll", "fast_math", "restrict"})
    assert audit["ok"] and mechs == ("fast_math", "unroll") and audit["undeclared"] == ["fast_math"]
    audit, mechs = audit_ladder_step(rich, simple, ("fast_math", "unroll"), {"unroll", "fast_math", "restrict"})
    assert audit["ok"] and mechs == ("fast_math", "unroll")
    audit, _ = audit_ladder_step(simple, rich, ("unroll",), {"unroll", "fast_math", "restrict"})
    assert not audit["ok"] and "loses" in audit["reason"]
    audit, _ = audit_ladder_step(simple, simple, (), {"restrict"})
    assert not audit["ok"] and "adds nothing" in audit["reason"]
    # one declared name whose step adds only it is the plain versions audit
    audit, mechs = audit_ladder_step(detect_all(kernel("restrict", "unroll")), simple, ("unroll",), {"unroll", "restrict"})
    assert mechs == ("unroll",) and set(audit) == {"ok", "kind", "added_forward", "lost_forward", "declared",
                                                   "detected", "reason"}


def test_a_ladder_from_the_git_history_of_one_file(tmp_path):
    import subprocess
    from klineage.lineage.ladder import ladder_from_git

    def git(*a):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=tmp_path, check=True,
                       capture_output=True)
    git("init", "-q")
    f = tmp_path / "k.cu"
    for subject, text in (("first", kernel()), ("mechanism=restrict", kernel("restrict")),
                          ("faster", "// klineage-step: mechanism=unroll,fast_math\n" + kernel("restrict", "unroll", "fast_math"))):
        f.write_text(text)
        git("add", "k.cu")
        git("commit", "-q", "-m", subject)
    ladder = ladder_from_git(f)
    assert [v.mechanisms for v in ladder] == [(), ("restrict",), ("unroll", "fast_math")]
    f.write_text("// klineage-step: mechanism=unrol\n" + kernel("unroll"))
    git("commit", "-q", "-am", "typo")
    with pytest.raises(ProposerError, match="did you mean unroll"):
        ladder_from_git(f)
