"""The forward re-derivation check measured on re-derivations that are other machine code
(benchmarks/rederive_h200.py).

- Without a GPU: every route the script's forward answers take restores exactly the rung's features
  (the walk's own audit) in a cubin whose machine code differs from the rung's, built here with
  nvcc; a walk over the scripted answers (a scripted gate: no figure here is a measurement) measures
  each such re-derivation on its own, reuses the rung's measurement where the answer is the rung
  itself, and rejects the slower one.
- The GPU record (benchmarks/results/rederive_<card>.json and its evaluations, named by the card it
  ran on): a ratio is reported only for a re-derivation of other machine code (its cubins are built
  again here and must differ), each per-trial ratio recomputed from the two recorded evaluations it
  compares, at least one re-derivation rejected below 0.99, and with nvcc the walks replayed from the
  evaluations reach the same steps, ratios and rejections, and the `worse` walk reaches the padding
  step it re-derives its own way, measures that kernel and rejects it. A missing or empty record
  fails.
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from klineage.apply.llm import LLMMaterializer
from klineage.gate.compile import nvcc_version
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
from record_names import card, card_of, the_record  # noqa: E402

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


# ---------------------------------------------------------------- the GPU record

@pytest.fixture(scope="module")
def record_path() -> Path:
    return the_record(RESULTS, bench.RECORD, RECORD_IT)


@pytest.fixture(scope="module")
def record(record_path) -> dict:
    for suffix in (".log", ".jsonl.gz"):
        side = record_path.with_name(record_path.name.removesuffix(".json") + suffix)
        assert side.is_file() and side.stat().st_size > 0, f"{side.name} is missing or empty: {RECORD_IT}"
    rec = json.loads(record_path.read_text())
    assert rec.get("walks"), f"{record_path.name} holds no walk: {RECORD_IT}"
    return rec


@pytest.fixture(scope="module")
def evaluations(record_path) -> dict:
    evals = record_path.with_name(record_path.name.removesuffix(".json") + ".jsonl.gz")
    return {r["eval_key"]: r for r in map(json.loads, gzip.decompress(evals.read_bytes()).splitlines())}


def _medians(rec: dict) -> list[list[float]]:
    return [t["trial_medians_us"] for t in rec["result"]["timing"]]


def _ratios(evaluations, eval_richer: str, eval_rederived: str) -> list[list[float]]:
    rich, red = evaluations[eval_richer], evaluations[eval_rederived]
    return [[o / r for o, r in zip(a, b)] for a, b in zip(_medians(rich), _medians(red))]


def test_recorded_live_on_a_gpu_and_named_by_it(record_path, record):
    assert record["mode"] == "live" and record["env"]["gpu"].startswith(("NVIDIA H200", "NVIDIA H100"))
    assert card_of(record_path, bench.RECORD) == card(record["env"]["gpu"]), \
        f"{record_path.name} was recorded on {record['env']['gpu']}: name it by that card"
    assert list(record["walks"]) == [name for name, _, _ in bench.WALKS]
    for name, w in record["walks"].items():  # measured in this run, nothing read from earlier records
        assert "steps" in w and w["missing"] == 0 and "replayed" not in w["sources"], name
        assert "live" in w["sources"] or set(w["sources"]) <= {"stored", "static"}, name
    assert "live" in record["walks"]["swiglu"]["sources"] and "live" in record["walks"]["row_sum"]["sources"]


def test_a_walk_that_measured_nothing_new_reuses_this_runs_measurements(record, evaluations):
    """A walk whose kernels an earlier walk of the same run already measured (the `worse` walk, up to
    the step it re-derives its own way) reads those evaluations, which the record exports."""
    for name, w in record["walks"].items():
        keys = [k for s in w["steps"] for k in (s["eval_richer"], s["eval_rederived"])]
        keys += [r["eval_key"] for r in w["rejections"] if r.get("eval_key")]
        for k in keys:
            e = evaluations.get(k)
            assert e is not None, (name, k)
            if e["status"] == "PASSED":  # measured on the record's card (a build error never reached it)
                assert (e.get("env") or {}).get("gpu") == record["env"]["gpu"], (name, k)


def test_every_reported_ratio_compares_two_kernels_of_other_machine_code(record, evaluations):
    steps = [s for w in record["walks"].values() for s in w["steps"]]
    measured = [s for s in steps if not s["rederived_identical"]]
    pairs = {(s["richer_hash"], s["rederived_hash"]) for s in measured}
    assert measured and record["summary"]["measured"] == record["summary"]["measured_other_code"] == len(pairs)
    for s in steps:
        if s["rederived_identical"]:  # the rung itself: its own measurement, no ratio reported
            assert s["route"] == "identity" and s["rederived_hash"] == s["richer_hash"] and s["min_ratio"] is None
            assert s["eval_rederived"] == s["eval_richer"]
            continue
        assert s["route"] == "other" and s["rederived_hash"] != s["richer_hash"]
        assert s["rederived_code"] != s["richer_code"] and s["rederived_cubin"] != s["richer_cubin"]
        assert s["eval_rederived"] != s["eval_richer"]  # two measurements, not a record with itself
        rich, red = evaluations[s["eval_richer"]], evaluations[s["eval_rederived"]]
        assert rich["status"] == red["status"] == "PASSED" and red["kernel_hash"] == s["rederived_hash"]
        want = _ratios(evaluations, s["eval_richer"], s["eval_rederived"])
        got = [t["speed_ratios"] for t in s["trials"]]
        assert len(got) == len(want) and all(g == pytest.approx(w, rel=1e-12) for g, w in zip(got, want))
        assert min(min(x) for x in want) >= THRESHOLD  # accepted: every trial passed
        assert s["min_ratio"] == pytest.approx(min(min(x) for x in want))


def test_rejected_rederivations_failed_the_threshold(record, evaluations):
    slow = [(w, r) for w in record["walks"].values() for r in w["rejections"] if r["kind"] == "rederive_slow"]
    assert slow, "no re-derivation was rejected below the threshold: the check has not been seen to reject"
    assert record["summary"]["rederive_slow_rejections"] == len(slow) >= 1
    for w, r in slow:
        assert r["rederived_code"] != r["richer_code"] and r["kernel_hash"] != r["richer_hash"]
        red = evaluations[r["eval_key"]]
        assert red["status"] == "PASSED" and red["kernel_hash"] == r["kernel_hash"]
        # the ratios recomputed against the evaluation of the state it was refused at
        assert evaluations[r["eval_richer"]]["kernel_hash"] == r["richer_hash"]
        want = _ratios(evaluations, r["eval_richer"], r["eval_key"])
        assert [t["speed_ratios"] for t in r["trials"]] == [pytest.approx(x, rel=1e-12) for x in want]
        assert min(x for t in r["trials"] for x in t["speed_ratios"]) < THRESHOLD
    assert record["summary"] == bench.summarize(record["walks"])  # the counts are the walks' own
    assert record["summary"]["below_threshold"] >= 1


@pytest.mark.nvcc
def test_the_recorded_cubins_are_built_again_here(record, routes):
    """Each kernel of a reported ratio built here: other machine code than its rung's, and, with the
    nvcc the device had, the very cubins the record names."""
    by_hash = {r["rederived_hash"]: r for rs in routes.values() for r in rs}
    same_nvcc = (record["env"] or {}).get("nvcc") == nvcc_version()
    items = [s for w in record["walks"].values() for s in w["steps"] if not s["rederived_identical"]]
    items += [r for w in record["walks"].values() for r in w["rejections"] if r["kind"] == "rederive_slow"]
    assert items
    for it in items:
        r = by_hash[it.get("rederived_hash") or it["kernel_hash"]]
        assert r["rederived_build"]["code"] != r["richer_build"]["code"]
        if same_nvcc:
            assert (r["richer_build"]["cubin"], r["rederived_build"]["cubin"]) == \
                (it["richer_cubin"], it["rederived_cubin"])


@pytest.mark.nvcc
def test_the_walks_replayed_from_the_record_reach_the_same_decisions(record_path, record, tmp_path):
    evals = record_path.with_name(record_path.name.removesuffix(".json") + ".jsonl.gz")
    assert bench.main(["--out", str(tmp_path), "--replay", "--import", str(evals)]) == 0
    again = json.loads((tmp_path / "rederive_replay.json").read_text())
    for name, w in record["walks"].items():
        got = again["walks"][name]
        assert "live" not in got["sources"] and got["missing"] == 0  # nothing measured here
        assert got["steps"] == w["steps"] and got["termination"] == w["termination"]
        assert [(r["kind"], r["mechanism"], r.get("trials")) for r in got["rejections"]] == \
            [(r["kind"], r["mechanism"], r.get("trials")) for r in w["rejections"]]


def test_the_worse_walk_measures_its_own_rederivation_and_rejects_it(record):
    w = record["walks"]["transpose_worse"]
    assert "live" in w["sources"], "the worse walk measured nothing of its own"
    slow = [r for r in w["rejections"] if r["kind"] == "rederive_slow"]
    assert [(r["mechanism"], r.get("route")) for r in slow] == [("smem_padding", "worse")]
