"""The run's target reaches every stage: retrieval scopes skills by it, the audit's compiler evidence is
built for it, and the gate configurations derived from a run's carry every field. Targets come from one
list (klineage.gate.compile.ARCHS)."""
import ast
import dataclasses
import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from klineage.cli import main
from klineage.gate.compile import ARCHS, SCOPE_ARCHS, SMEM_TARGETS
from klineage.gate.gate import GateConfig

ROOT = Path(__file__).resolve().parents[1]
GELU = ROOT / "apply_workloads" / "gelu"


def test_apply_dry_run_retrieves_with_the_target_arch_scope(tmp_path):
    db = tmp_path / "lib.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    plans = {}
    for arch in ("sm_80", "sm_90a"):
        r = CliRunner().invoke(main, ["apply", "--workload", str(GELU), "--start", str(GELU / "naive.cu"), "--db", str(db),
                                      "--dry-run", "--admission", "off", "--materializer", "sweep", "--arch", arch, "--json"])
        assert r.exit_code == 0, r.output
        plans[arch] = json.loads(r.output)
    old, new = plans["sm_80"], plans["sm_90a"]
    assert old["arch"] == "sm_80" and old["target"]["platform"] == "sm_80"
    assert new["target"]["platform"] == "sm_90" and new["retrieved"]
    # every shipped skill was measured on an H200 (sm_90): none holds an sm_80 target
    assert not old["retrieved"] and old["excluded"]
    assert all(any("does not hold the target platform sm_80" in why for why in e["reasons"]) for e in old["excluded"])
    # a family whose hardware an sm_80 GPU lacks says so
    wgmma = [e for e in old["excluded"] if e["name"].startswith("wgmma/")]
    assert wgmma and all(any("wgmma needs one of sm_90a" in why for why in e["reasons"]) for e in wgmma)


def test_the_audit_builds_its_compiler_evidence_for_the_run_target(monkeypatch):
    from klineage.lineage.proposers import RulesProposer
    from klineage.lineage.walk import Walker
    from klineage.mechanisms import evidence as ev_mod
    from klineage.workload import load_workload
    from tests.lineage.test_walk import ScriptedGate
    asked = []
    real = ev_mod.compile_kernel

    def spy(k, arch):
        asked.append(arch)
        return real(k, arch)
    monkeypatch.setattr(ev_mod, "compile_kernel", spy)
    ev_mod._CACHE.clear()
    gate = ScriptedGate()
    gate.config = dataclasses.replace(gate.config, arch="sm_80")
    lin = Walker(gate, load_workload(GELU), [RulesProposer()]).run((GELU / "naive.cu").read_text().replace(
        "__nv_bfloat16* out, long long n", "__nv_bfloat16* __restrict__ out, long long n"))
    assert lin["transitions"] and asked and set(asked) == {"sm_80"}


def test_gate_configurations_derived_from_a_run_keep_every_field():
    from klineage.lineage.analyze import round_gate
    from klineage.lineage.probe import probe_gate

    class G:
        def __init__(self, config):
            self.config = config

        def with_config(self, config, share_worker=True):
            return G(config)
    # every field off its default: a field added to GateConfig is carried, or this test names it
    odd = {"arch": "sm_80", "extra_flags": ("-DX=1",), "seeds": (7, 8, 9), "timing": {"reps": 3}, "shapes": "benchmark",
           "guard": False, "stall_s": 5.0, "total_s": 50.0, "round": 1}
    assert set(odd) == {f.name for f in dataclasses.fields(GateConfig)}, "give the new field an odd value here"
    base = GateConfig(**odd)
    r = round_gate(G(base), 3).config
    assert dataclasses.asdict(r) == {**dataclasses.asdict(base), "round": 3}
    p = probe_gate(G(base)).config
    assert dataclasses.asdict(p) == {**dataclasses.asdict(base), "seeds": (7, 8), "timing": {}, "shapes": "benchmark"}


def test_targets_come_from_one_list():
    from klineage.gate import gate
    assert set(SCOPE_ARCHS) <= set(ARCHS) and set(SMEM_TARGETS) <= set(ARCHS)
    assert all(set(targets) <= set(ARCHS) for _, _, targets in gate._ARCH_ONLY)
    # no other module writes out a list of targets of its own
    lists = []
    for path in (ROOT / "klineage").rglob("*.py"):
        if path == ROOT / "klineage" / "gate" / "compile.py":
            continue
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
                sm = [e.value for e in n.elts if isinstance(e, ast.Constant) and str(e.value).startswith("sm_")]
                if len(sm) >= 2:
                    lists.append(f"{path.relative_to(ROOT)}:{n.lineno}")
    assert not lists, "targets listed outside klineage/gate/compile.py (ARCHS): " + ", ".join(lists)
