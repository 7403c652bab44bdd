"""The forward re-derivation check measured on re-derivations that are other machine code
(benchmarks/rederive_h200.py).

- Without a GPU: every route the script's forward answers take restores exactly the rung's features
  (the walk's own audit) in a cubin whose machine code differs from the rung's, built here with
  nvcc; a walk over the scripted answers (a scripted gate: no figure here is a measurement) measures
  each such re-derivation on its own, reuses the rung's measurement where the answer is the rung
  itself, and rejects the slower one.
- The GPU record is checked by tests/check_rederive_record.py (by hand until a record passes it).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from klineage.apply.llm import LLMMaterializer
from klineage.mechanisms.audit import audit_rederived
from klineage.lineage.proposers import make_proposer
from klineage.lineage.walk import Limits, Walker
from klineage.llm import DEFAULT_MODEL, OpenAICompatBackend
from klineage.mechanisms import detect_all
from klineage.workload import load_workload
from tests.lineage.test_walk import ScriptedGate
from tests.support.scripted_server import ScriptedServer

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))
import rederive_h200 as bench  # noqa: E402

THRESHOLD = bench.LIMITS["min_rederive_ratio"]
RECORD_IT = ("record it on a GPU (one device call, carry .whlx): python3 benchmarks/rederive_h200.py --out $OUT, "
             "then copy $OUT/rederive_<card>.{json,log,jsonl.gz} into benchmarks/results/ (see the script's docstring)")


@pytest.fixture(scope="module")
def routes() -> dict:
    return {name: bench.routes(wl, kind) for name, wl, kind in bench.WALKS}


@pytest.mark.nvcc
def test_every_route_restores_the_rungs_features_in_other_machine_code(routes):
    kinds = {}
    for name, rs in routes.items():
        for r in rs:
            kinds.setdefault(r["route"], []).append((name, r["mechanism"]))
            if r["route"] == "identity":  # the rung itself: the walk reuses its measurement
                assert r["rederived_hash"] == r["richer_hash"] and r["config"] is None
                continue
            rung = next(v for v in _ladder(name) if v.label == r["richer"])
            assert audit_rederived(detect_all(rung.source), detect_all(r["source"]))["ok"], (name, r["mechanism"])
            assert r["rederived_build"]["code"] != r["richer_build"]["code"], (name, r["mechanism"])
            assert r["rederived_build"]["cubin"] != r["richer_build"]["cubin"]
    assert len(kinds["other"]) >= 3 and kinds["worse"] == [("transpose_worse", "smem_padding")]


def _ladder(name: str):
    from klineage.lineage.proposers import ladder_from_folder
    wl = dict((n, w) for n, w, _ in bench.WALKS)[name]
    return ladder_from_folder(ROOT / "expert_kernels" / wl)


def test_the_machine_code_hash_reads_the_text_sections_only():
    """Two cubins that differ outside their .text sections have the same code hash."""
    import struct
    # a minimal ELF64: a section-name table and two sections, .text.k (code) and .nv.info.k (metadata)
    names = b"\0.shstrtab\0.text.k\0.nv.info.k\0"
    code, info = b"\x01\x02\x03\x04", b"meta"

    def elf(code: bytes, info: bytes) -> bytes:
        body = names + code + info
        off_names, off_code, off_info = 64, 64 + len(names), 64 + len(names) + len(code)
        shoff = 64 + len(body)
        head = bytearray(64)
        head[:5] = b"\x7fELF\x02"
        struct.pack_into("<Q", head, 0x28, shoff)
        struct.pack_into("<HHH", head, 0x3A, 64, 4, 1)
        secs = [(0, 0, 0, 0, 0, 0), (1, 3, 0, 0, off_names, len(names)), (11, 1, 0, 0, off_code, len(code)),
                (19, 1, 0, 0, off_info, len(info))]
        return bytes(head) + body + b"".join(struct.pack("<IIQQQQ", *s) + bytes(24) for s in secs)
    assert bench.cubin_code(elf(code, info)) == bench.cubin_code(elf(code, b"META"))
    assert bench.cubin_code(elf(code, info)) != bench.cubin_code(elf(b"\x01\x02\x03\x05", info))
    with pytest.raises(ValueError):
        bench.cubin_code(b"not an elf")


@pytest.mark.nvcc
def test_a_walk_measures_each_other_route_and_rejects_the_slower(routes):
    """The transpose walks with a scripted gate: 100 us for every kernel but the worse re-derivation
    (150 us); the launch-bounds and padding steps are measured on their own, the others reuse the
    rung's evaluation, and the worse padding fails the threshold."""
    worse = {r["rederived_hash"] for r in routes["transpose_worse"] if r["route"] == "worse"}
    from klineage.gate.gate import kernel_hash
    wl_dir = ROOT / "expert_kernels" / "transpose"
    got = {}
    for name, kind in (("transpose", "other"), ("transpose_worse", "worse")):
        script, rs = bench.script_for("transpose", kind)
        gate = ScriptedGate(latency=lambda src: 150.0 if kernel_hash(src) in worse else 100.0)
        seen: list[str] = []
        evaluate = gate.evaluate
        gate.evaluate = lambda src, wl, origin=None, replay=False: seen.append(kernel_hash(src)) or evaluate(src, wl, origin, replay)
        with ScriptedServer(script["replies"], script["default"]) as server:
            llm = LLMMaterializer(OpenAICompatBackend(server.url + "/v1", DEFAULT_MODEL, env={}), budget_usd=2.0)
            lin = Walker(gate, load_workload(wl_dir), [make_proposer("llm", wl_dir, llm=llm)],
                         Limits(**bench.LIMITS)).run((wl_dir / "expert.cu").read_text())
        got[name] = (lin, rs, seen)
    lin, rs, seen = got["transpose"]
    assert [t["mechanism"] for t in lin["transitions"]] == [r["mechanism"] for r in rs]
    for t, r in zip(lin["transitions"], rs):
        assert t["rederived_identical"] == (r["route"] == "identity")
        if r["route"] == "other":  # measured on its own: one evaluation of the re-derived kernel
            assert t["eval_rederived"] != t["eval_richer"] and seen.count(r["rederived_hash"]) == 1
    lin, rs, _ = got["transpose_worse"]
    slow = [r for r in lin["rejections"] if r["kind"] == "rederive_slow"]
    assert len(slow) == 1 and slow[0]["mechanism"] == "smem_padding" and slow[0]["kernel_hash"] in worse
    assert all(x == pytest.approx(100 / 150) for t in slow[0]["trials"] for x in t["speed_ratios"])
    assert lin["termination"] == "no_proposal" and "smem_padding" not in [t["mechanism"] for t in lin["transitions"]]


def test_the_summary_counts_ratios_of_other_code_only():
    step = lambda ident, ratios, code: {"rederived_identical": ident, "richer_code": "a", "rederived_code": code,  # noqa: E731
                                        "richer_hash": "r", "rederived_hash": "r" if ident else code,
                                        "trials": [{"speed_ratios": ratios}]}
    walks = {"w": {"steps": [step(True, [1.0, 1.0], "a"), step(False, [0.995, 1.01], "b")],
                   "rejections": []},
             "again": {"steps": [step(False, [0.995, 1.01], "b")],  # the same pair in another walk: once
                   "rejections": [{"kind": "rederive_slow", "richer_code": "a", "rederived_code": "c",
                                   "trials": [{"speed_ratios": [0.6, 0.7]}]}, {"kind": "audit"}]}}
    s = bench.summarize(walks)
    assert s["steps"] == 3 and s["identity"] == 1 and s["measured"] == s["measured_other_code"] == 1
    assert s["trial_ratios"] == 4 and s["ratio_min"] == 0.6 and s["ratio_max"] == 1.01
    assert s["below_threshold"] == 2 and s["rederive_slow_rejections"] == s["rejected_other_code"] == 1
