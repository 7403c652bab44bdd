"""`klineage heldout` on three fixture instances (tests/heldout/fixtures/heldout: a gemm, an attention
and a reduction with a naive start) with a synthetic four-skill library and the real Gate (guard,
nvcc, content-addressed records) in front of a scripted stand-in for the GPU worker
(tests/heldout/support.py: its figures are a function of the kernel's configuration, not
measurements).

Covered: each condition's budget accounting; the random control's points, fixed by its seed; the
foreign control steered only by skills of the unrelated families; the llm condition listed as not run
with its reason; the reference fallback chosen automatically when the primary fails, or forced; a
failed instance counted in geomeans; the 95% interval over trial ratios; the winnowing similarity; the
audit's queries proving no overlap, and finding one when a lineage holds a held-out case; a replay
giving the same report byte for byte; a replay killed at random points resuming to the same result;
the dry run and the pipeline file.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from klineage.apply.materialize import random_points, sweep_space
from klineage.cli import main
from klineage.gate.gate import DEFAULT_SEEDS, GateConfig, kernel_hash
from klineage.heldout import similarity, stats
from klineage.heldout.instances import fallback_hash
from klineage.heldout.records import LIBRARY_SUFFIX, write_library_record
from klineage.heldout.sources import random_seed
from klineage.pipelines import load_pipeline
from klineage.store import open_store
from klineage.workload import load_workload

from tests.heldout.support import FIXTURES, ROOT, klineage_cli as _klineage, library_cards, make_library, script_gpu
from tests.reliability.support import run_until

pytestmark = pytest.mark.nvcc

BUDGET, SEED = 8, 7
ARGS = ["--budget", str(BUDGET), "--seed", str(SEED), "--quiet"]
KERNELS = FIXTURES / "kernels"


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return make_library(tmp_path_factory.mktemp("lib") / "lib.duckdb")


@pytest.fixture(scope="module")
def experts(tmp_path_factory):
    """A snapshot of the expert corpus's .cu files: the similarity audit reads the corpus, and a
    report compared byte for byte must not see it change between two runs of a test."""
    snap = tmp_path_factory.mktemp("experts")
    for p in (ROOT / "expert_kernels").rglob("*.cu"):
        dst = snap / p.relative_to(ROOT / "expert_kernels")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, dst)
    return snap


@pytest.fixture(autouse=True)
def _fixed_corpus(experts, monkeypatch):
    monkeypatch.setenv("KLINEAGE_EXPERTS", str(experts))


def _run(tmp_path: Path, library: Path, monkeypatch, *extra, name="run", broken_vendor=(), wrong=None,
         before=None, gpu: dict | None = None) -> tuple[Path, Path, dict, object]:
    """One recorded (scripted) run through the CLI: (db, out, report, result); `gpu` gets the scripted
    GPU's state (the workers the run started)."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    db, out = tmp_path / f"{name}.duckdb", tmp_path / f"{name}_out"
    shutil.copy(library, db)
    if before:
        before(db)
    state = script_gpu(monkeypatch, broken_vendor=broken_vendor, wrong=wrong)
    if gpu is not None:
        gpu.update(state)
    r = CliRunner().invoke(main, ["heldout", str(FIXTURES), "--db", str(db), "--out", str(out), *ARGS, *extra])
    assert r.exit_code == 0, r.output
    return db, out, json.loads((out / "heldout.json").read_text()), r


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, library, experts):
    """The reference run of the module: every condition, default settings; its records exported."""
    tmp = tmp_path_factory.mktemp("recorded")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KLINEAGE_HOME", str(tmp_path_factory.getbasetemp() / "klineage-home"))
        mp.setenv("KLINEAGE_EXPERTS", str(experts))
        gpu: dict = {}
        db, out, report, res = _run(tmp, library, mp, gpu=gpu)
    store = open_store(db)
    try:
        hashes = [load_workload(d).content_hash for d in sorted(FIXTURES.iterdir()) if (d / "workload.py").is_file()]
        rec = tmp / "records" / "heldout_scripted.jsonl.gz"
        n = store.export_evaluations(rec, workload_hashes=hashes + [fallback_hash(h) for h in hashes])
        assert n > 20
    finally:
        store.close()
    return {"db": db, "out": out, "report": report, "records": rec.parent, "output": res.output,
            "workers": len(gpu["workers"])}


def _rows(report: dict) -> dict[tuple[str, str], dict]:
    return {(i["instance"], c): r for i in report["instances"] for c, r in i["conditions"].items()}


# -- conditions ----------------------------------------------------------------------------------------

def test_every_condition_keeps_to_its_budget(recorded):
    rows = _rows(recorded["report"])
    assert {c for _, c in rows} == {"idiom", "skills", "control-random", "control-foreign", "llm"}
    for (inst, cond), r in rows.items():
        if cond == "llm":
            continue
        assert r["status"] == "PASSED", (inst, cond, r.get("reason"))
        used = sum(a.get("evaluated", 0) for a in r["arms"])
        assert r["evaluations_used"] == used <= (0 if cond == "idiom" else BUDGET), (inst, cond)
        for a in r["arms"]:
            if "evaluated" in a:  # each arm counted only its candidates, never more than its share
                assert a["evaluated"] == a["gate_evaluations"]["candidates"] <= a["budget"]
    # the random control spends the whole budget where the space allows (no tunables: nothing to draw)
    for inst in ("rms_tiny", "mm_tiny"):
        space = sweep_space(_idiom(inst))
        size = math.prod(len(v) for v in space.values()) - 1
        assert rows[(inst, "control-random")]["evaluations_used"] == min(BUDGET, size)
    assert rows[("attn_tiny", "control-random")]["evaluations_used"] == 0
    # a reduction's skills: the steered sweep, then rules from the naive start with what is left
    arms = rows[("rms_tiny", "skills")]["arms"]
    assert [(a["arm"], a["start"]) for a in arms] == [("sweep", "idiom"), ("rules", "naive")]
    assert arms[1]["budget"] == BUDGET - arms[0]["evaluated"]
    assert [a["arm"] for a in rows[("mm_tiny", "skills")]["arms"]] == ["sweep"]


def test_repeats_run_in_one_worker_per_round_not_one_per_repeat(recorded):
    """The search's worker, one for the apply loop's round-2 re-measures and one per final round: the
    whole run starts no other process, however many candidates were re-measured."""
    rows = _rows(recorded["report"]).values()
    re_measures = sum(a["gate_evaluations"]["re_measures"] for r in rows for a in r.get("arms", [])
                      if "gate_evaluations" in a)
    assert re_measures >= 3
    assert recorded["workers"] == 1 + 1 + recorded["report"]["config"]["final_rounds"]


def _idiom(inst: str) -> str:
    rel = load_workload(FIXTURES / inst).module.STARTS["idiom"]
    return (FIXTURES / rel).read_text()


def test_rows_carry_intervals_correctness_and_the_reference(recorded):
    report = recorded["report"]
    cfg = report["config"]
    for (inst, cond), r in _rows(report).items():
        if r["status"] != "PASSED":
            continue
        lo, hi = r["ci95"]
        assert lo <= r["speedup"] <= hi and r["n_trials"] == cfg["final_rounds"] * cfg["timing"]["trials"]
        corr = r["correctness"]
        assert corr["seeds"] == list(DEFAULT_SEEDS) == list(GateConfig().seeds) and corr["shapes"] == "benchmark and probe"
        wl = load_workload(FIXTURES / inst)
        n_shapes = len(wl.benchmark_cases) + len(wl.probe_shapes)
        assert [x["round"] for x in corr["rounds"]] == [3, 4]
        assert all(x["shapes_checked"] == x["shapes_passed"] == n_shapes for x in corr["rounds"])
        assert r["reference"]["used"] == "primary" and r["reference"]["name"] == wl.vendor_name
        assert len(r["final_eval_keys"]) == 2
    assert report["environment"] and report["environment"][0]["gpu"] == "scripted worker (test double)"
    out = recorded["out"]
    assert (out / "heldout.txt").read_text().startswith("held-out check")
    baked = (out / "kernels" / "rms_tiny" / "skills.cu").read_text()
    assert "#define RMS_UNROLL 8" in baked  # the kept sweep point, written into the kernel as it ran
    assert "verdict:" in recorded["output"] and "== reduction" in recorded["output"]


def test_llm_is_listed_as_not_run_without_a_key(recorded):
    report = recorded["report"]
    nr = report["not_run"]
    assert {m["instance"] for m in nr} == {"attn_tiny", "mm_tiny", "rms_tiny"} and {m["condition"] for m in nr} == {"llm"}
    assert all("ANTHROPIC_API_KEY is not set" in m["reason"] for m in nr)
    llm = report["summary"]["overall"]["llm"]
    assert llm["geomean"] is None and len(llm["not_counted"]) == 3


def test_llm_condition_runs_through_the_sdk_with_a_budget_per_instance(tmp_path, library, monkeypatch):
    """With a key, the llm condition goes through the anthropic SDK (to the scripted server on
    loopback): the rms answer (the best configuration written into the kernel) is gated, re-measured
    and kept; mm's answer does not compile and that feedback reaches the next prompt; attention's
    answers hold no kernel. --budget-usd is per instance: every instance gets its own calls (one
    materializer for the whole run let the first instances spend the later ones' budget). The key is
    stored nowhere, and a replay lists the condition as not run."""
    from tests.support.scripted_server import ScriptedServer
    key = "sk-ant-heldout-test-0123456789"
    rms = _idiom("rms_tiny")
    best = rms.replace("#define RMS_BLOCK 256", "#define RMS_BLOCK 512").replace("#define RMS_UNROLL 1",
                                                                                  "#define RMS_UNROLL 8")
    assert best != rms
    replies = [{"text": "Block of 512, unroll 8:\n```cuda\n" + best + "```\n", "when": ['NAME = "rms_tiny"', "#define RMS_BLOCK 256"]},
               {"text": "```cuda\n#include <cuda_runtime.h>\nextern \"C\" cudaError_t mm(void) { return oops; }\n```",
                "when": ['NAME = "mm_tiny"']},
               {"text": "No kernel this time.", "when": ['NAME = "mm_tiny"', "COMPILE_ERROR"]}]
    db, out = tmp_path / "llm.duckdb", tmp_path / "llm_out"
    shutil.copy(library, db)
    script_gpu(monkeypatch)
    # a long answer without a kernel: about 3000 output tokens, $0.045 a call, so a $0.20 budget of
    # one instance lasts two or three calls and three instances spend more than $0.20 in all
    chatty = "I would leave this kernel as it is. " * 330
    with ScriptedServer(replies, default={"text": chatty}) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", key)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        r = CliRunner().invoke(main, ["heldout", str(FIXTURES), "--db", str(db), "--out", str(out), *ARGS,
                                      "--conditions", "idiom,llm", "--budget-usd", "0.2"])
        prompts = [json.dumps(req) for req in server.requests]
    assert r.exit_code == 0, r.output
    report = json.loads((out / "heldout.json").read_text())
    rows = _rows(report)
    assert not report["not_run"] and report["summary"]["overall"]["llm"]["geomean"] is not None
    for inst in ("attn_tiny", "mm_tiny", "rms_tiny"):
        row = rows[(inst, "llm")]
        assert row["status"] == "PASSED", (inst, row.get("reason"))
        (arm,) = row["arms"]
        assert arm["arm"] == "llm" and arm["materializers"] == ["llm"]
        assert any(st["backend"] == "llm" for st in arm["steps"]), inst  # its own calls, whatever came before
        assert 0 < arm["spent_usd"] <= 0.2
    assert sum(rows[(i, "llm")]["arms"][0]["spent_usd"] for i in ("attn_tiny", "mm_tiny", "rms_tiny")) > 0.2
    assert rows[("attn_tiny", "llm")]["arms"][0]["stop_reason"] == "budget_usd"
    rms_row = rows[("rms_tiny", "llm")]
    assert rms_row["kernel_hash"] == kernel_hash(best) and rms_row["speedup"] > rows[("rms_tiny", "idiom")]["speedup"]
    assert [st["status"] for st in rms_row["arms"][0]["steps"]][0] == "PASSED"
    mm_steps = rows[("mm_tiny", "llm")]["arms"][0]["steps"]
    assert mm_steps[0]["status"] == "COMPILE_ERROR" and mm_steps[1:] and {st["status"] for st in mm_steps[1:]} == {"NO_KERNEL"}
    assert rows[("mm_tiny", "llm")]["kernel_hash"] == kernel_hash(_idiom("mm_tiny"))  # the start stays
    assert any("COMPILE_ERROR" in p and 'NAME = \\"mm_tiny\\"' in p for p in prompts)
    assert {st["status"] for st in rows[("attn_tiny", "llm")]["arms"][0]["steps"]} == {"NO_KERNEL"}
    assert {u["skill"] for u in rms_row["skills_used"]} and all(u["mined_from"] for u in rms_row["skills_used"])
    for f in (db, out / "heldout.json", out / "heldout.txt"):
        assert key.encode() not in f.read_bytes(), f
    # a replay has no model exchanges to replay: the condition is listed as not run, with the reason
    db2 = tmp_path / "llm_replay.duckdb"
    shutil.copy(db, db2)
    r = CliRunner().invoke(main, ["heldout", str(FIXTURES), "--db", str(db2), "--out", str(tmp_path / "o2"), *ARGS,
                                  "--conditions", "idiom,llm", "--replay"])
    assert r.exit_code == 0, r.output
    rep2 = json.loads((tmp_path / "o2" / "heldout.json").read_text())
    assert {m["condition"] for m in rep2["not_run"]} == {"llm"} and all("--replay" in m["reason"] for m in rep2["not_run"])


def test_random_control_is_fixed_by_its_seed(recorded, tmp_path, library, monkeypatch):
    rows = _rows(recorded["report"])
    for inst in ("rms_tiny", "mm_tiny"):
        got = [s["config"] for s in rows[(inst, "control-random")]["arms"][0]["steps"]]
        want = random_points(_idiom(inst), BUDGET, random_seed(SEED, inst))[1:]
        assert got == want and all(not s.get("steered_by") for s in rows[(inst, "control-random")]["arms"][0]["steps"])
    assert random_points(_idiom("mm_tiny"), 5, 1) == random_points(_idiom("mm_tiny"), 5, 1)
    # another seed draws other points
    _, _, other, _ = _run(tmp_path, library, monkeypatch, "--seed", str(SEED + 1), "--conditions", "control-random",
                          name="seed")
    a = [s["config"] for s in _rows(other)[("mm_tiny", "control-random")]["arms"][0]["steps"]]
    b = [s["config"] for s in rows[("mm_tiny", "control-random")]["arms"][0]["steps"]]
    assert a != b and len(a) == len(b)


def test_foreign_control_is_steered_only_by_unrelated_families(recorded):
    report = recorded["report"]
    rows = _rows(report)
    names = {c["name"]: c for c in library_cards()}
    fams = {"red_cfg/block-unroll": "reduction", "restrict/pointer-parameters": "reduction",
            "gemm_cfg/block-unroll": "gemm", "tr_cfg/items": "transpose"}
    assert set(fams) == set(names)
    for inst, family in (("mm_tiny", "gemm"), ("rms_tiny", "reduction"), ("attn_tiny", "attention")):
        allowed = set(report["config"]["foreign"][family])
        want = sorted(n for n, f in fams.items() if f in allowed)
        r = rows[(inst, "control-foreign")]
        assert r["library"] == want == report["library"]["foreign"][family]
        steered = {n for a in r["arms"] for s in a.get("steps", []) for n in s.get("steered_by", [])}
        used = {s["skill"] for s in r["skills_used"]}
        assert steered <= used <= set(want), (inst, used)
    assert {s["skill"] for s in rows[("mm_tiny", "control-foreign")]["skills_used"]} == {"red_cfg/block-unroll",
                                                                                        "tr_cfg/items"}
    assert {s["skill"] for s in rows[("rms_tiny", "control-foreign")]["skills_used"]} == {"gemm_cfg/block-unroll"}
    # the skills condition retrieves from the whole library, and kept the gemm skill's point on the gemm
    kept = {s["skill"] for s in rows[("mm_tiny", "skills")]["skills_used"] if s["kept"]}
    assert kept == {"gemm_cfg/block-unroll"}
    assert next(s for s in rows[("mm_tiny", "skills")]["skills_used"] if s["kept"])["mined_from"] == ["gemm"]


def test_reference_falls_back_when_the_primary_fails_and_says_so(tmp_path, library, monkeypatch):
    _, _, report, _ = _run(tmp_path, library, monkeypatch, "--conditions", "idiom,skills", broken_vendor={"rms_tiny"})
    rows = _rows(report)
    ref = rows[("rms_tiny", "idiom")]["reference"]
    assert ref["used"] == "fallback" and "flag_gems" in ref["reason"]
    assert ref["name"] == load_workload(FIXTURES / "rms_tiny").module.VENDOR_FALLBACK
    assert rows[("rms_tiny", "skills")]["status"] == "PASSED" and rows[("rms_tiny", "skills")]["reference"] == ref
    assert rows[("mm_tiny", "idiom")]["reference"]["used"] == "primary"
    store = open_store(tmp_path / "run.duckdb")
    try:
        rec = store.get_evaluation(rows[("rms_tiny", "idiom")]["final_eval_keys"][0])
        assert rec["workload_hash"] == fallback_hash(load_workload(FIXTURES / "rms_tiny").content_hash)
    finally:
        store.close()
    _, _, forced, _ = _run(tmp_path, library, monkeypatch, "--conditions", "idiom", "--vendor", "fallback", name="forced")
    assert {r["reference"]["used"] for r in _rows(forced).values()} == {"fallback", "primary"}  # attn has no fallback
    assert _rows(forced)[("mm_tiny", "idiom")]["reference"]["reason"] == "--vendor fallback"


def test_a_failed_instance_is_counted_not_dropped(tmp_path, library, monkeypatch):
    wrong = lambda name, source, cfg: name == "mm_tiny" and "MM_UNROLL" in source  # every mm kernel is wrong
    _, _, report, _ = _run(tmp_path, library, monkeypatch, "--conditions", "idiom,skills,control-random", wrong=wrong)
    rows = _rows(report)
    for cond in ("idiom", "skills", "control-random"):
        assert rows[("mm_tiny", cond)]["status"] == "FAILED" and rows[("mm_tiny", cond)]["reason"]
    fs = report["config"]["failure_speedup"]
    agg = report["summary"]["overall"]["skills"]
    passed = [r["speedup"] for (i, c), r in rows.items() if c == "skills" and r["status"] == "PASSED"]
    assert agg["failed"] == 1 and agg["passed"] == 2
    assert agg["geomean"] == pytest.approx(math.exp((sum(map(math.log, passed)) + math.log(fs)) / 3))
    assert agg["geomean_success_only"] == pytest.approx(math.exp(sum(map(math.log, passed)) / 2))
    assert report["summary"]["families"]["gemm"]["skills"]["geomean"] == pytest.approx(fs)


# -- statistics ------------------------------------------------------------------------------------------

def test_interval_is_over_the_paired_trial_ratios():
    tm = [{"trial_medians_us": [10.0, 11.0, 9.0], "vendor_trial_medians_us": [12.0, 12.0, 12.0],
           "speedup_vs_vendor": 1.2},
          {"trial_medians_us": [10.0, 10.0, 10.5], "vendor_trial_medians_us": [11.0, 12.5, 12.0],
           "speedup_vs_vendor": 1.2}]
    got = stats.shape_speedup(tm)
    ratios = [1.2, 12 / 11, 12 / 9, 1.1, 1.25, 12 / 10.5]
    logs = [math.log(r) for r in ratios]
    m = sum(logs) / 6
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / 5)
    assert got["trial_ratios"] == pytest.approx(ratios) and got["n"] == 6
    assert got["speedup"] == pytest.approx(math.exp(m))
    assert got["ci95"] == pytest.approx([math.exp(m - 2.571 * sd / math.sqrt(6)), math.exp(m + 2.571 * sd / math.sqrt(6))])
    assert got["latency_us"] == pytest.approx(10.0) and got["reference_us"] == pytest.approx(12.0)
    same = stats.shape_speedup([{"trial_medians_us": [5.0, 5.0], "vendor_trial_medians_us": [10.0, 10.0]}])
    assert same["ci95"] == pytest.approx([2.0, 2.0])
    assert stats.t975(1) == 12.706 and stats.t975(200) == 1.96


def _row(inst, cond, status, speedup=None, var=0.0, keys=None):
    return {"instance": inst, "condition": cond, "status": status, "speedup": speedup, "log_var": var, "df": 5,
            "ci95": [speedup * 0.99, speedup * 1.01] if speedup else None, "final_eval_keys": keys or [inst + cond]}


def test_host_dispatch_is_summed_per_shape_and_a_window_it_outlasted_is_listed(recorded):
    """The gate records each timed call's host-side time and, with a backlog, the spin before it; the
    report lists a final measurement whose reference outlasted its spin on more than 5% of the calls."""
    from klineage.heldout.report import window_check
    from klineage.report.text import format_heldout

    def tm(ref_over, ref_med):
        return {"trial_medians_us": [10.0, 10.0, 10.0], "vendor_trial_medians_us": [12.0, 12.0, 12.0], "reps": 50,
                "trials": 3, "backlog_us": {"candidate": 50.0, "vendor": 520.0},
                "host_dispatch_us": {"candidate": {"median_us": 9.0, "p90_us": 11.0, "max_us": 30.0, "over_backlog": 0},
                                     "vendor": {"median_us": ref_med, "p90_us": 260.0, "max_us": 900.0,
                                                "over_backlog": ref_over}}}
    got = stats.shape_speedup([tm(2, 240.0), tm(9, 250.0)])["host_dispatch"]
    assert got == {"median_us": {"kernel": 9.0, "reference": 245.0}, "timed_calls": 300,
                   "backlog_us": {"kernel": 50.0, "reference": 520.0}, "over_backlog": {"kernel": 0, "reference": 11}}
    assert "host_dispatch" not in stats.shape_speedup([{"trial_medians_us": [5.0], "vendor_trial_medians_us": [9.0]}])
    row = lambda inst, over: {"instance": inst, "condition": "skills", "per_shape": [  # noqa: E731
        {"shape": {"seq": 1024}, **{k: v for k, v in stats.shape_speedup([tm(over, 240.0), tm(0, 240.0)]).items()
                                    if k in ("speedup", "host_dispatch")}}]}
    win = window_check([row("attn_a", 16), row("attn_b", 15), {"instance": "old", "condition": "idiom", "per_shape": [{}]}])
    assert win["shapes"] == 2 and [(w["instance"], w["side"], w["over_backlog"]) for w in win["suspect"]] == \
        [("attn_a", "reference", 16)]  # 16 of 300 calls is over 5%; 15 is not
    assert window_check([{"instance": "old", "condition": "idiom", "per_shape": [{"speedup": 1.0}]}]) is None
    assert "window_check" not in recorded["report"]["summary"]  # the scripted worker records no host times
    rep = json.loads(json.dumps(recorded["report"]))
    rep["summary"]["window_check"] = win
    text = format_heldout(rep)
    assert "attn_a/skills reference: 16 of 300 calls (host 240 us median, spin 520 us)" in text


def test_random_coverage_lists_where_control_random_gated_its_whole_space(recorded):
    """attention's idiom grid builds at 12 of its 27 points: a control-random that runs out of points
    before its budget has searched the space whole, and the report says where."""
    from klineage.heldout.report import random_coverage
    from klineage.report.text import format_heldout

    def row(inst, fam, stop, evaluated=12):
        return {"instance": inst, "family": fam, "condition": "control-random", "status": "PASSED",
                "arms": [{"arm": "random", "stop_reason": stop, "evaluated": evaluated}]}
    got = random_coverage([row("attn_a", "attention", "no_candidates", 11), row("attn_b", "attention", "budget_steps"),
                           row("mm_a", "gemm", "budget_steps"), row("tiny", "gemm", "no_candidates", 0),
                           {**row("attn_c", "attention", "no_candidates"), "status": "MISSING"},
                           {**row("attn_a", "attention", "no_candidates"), "condition": "skills"}])
    assert got == {"attention": {"instances": 2, "whole_space": ["attn_a"]}, "gemm": {"instances": 2, "whole_space": []}}
    rep = json.loads(json.dumps(recorded["report"]))
    assert set(rep["summary"]["random_coverage"]) == {r["family"] for i in rep["instances"] for r in [i]}
    rep["summary"]["random_coverage"] = got
    assert ("control-random, attention: gated its kernel's whole sweep space (every configuration built and timed, "
            "or refused by nvcc) before its budget ran out on 1 of 2 instances (attn_a)") in format_heldout(rep)


def test_geomeans_count_failures_and_comparisons_use_the_noise():
    rows = [_row("a", "skills", "PASSED", 2.0), _row("b", "skills", "FAILED"), _row("c", "skills", "NOT_RUN")]
    agg = stats.aggregate(rows, 0.1)
    assert agg["geomean"] == pytest.approx(math.sqrt(2.0 * 0.1)) and agg["geomean_success_only"] == 2.0
    assert agg["failed"] == 1 and agg["not_counted"] == ["c (NOT_RUN)"] and agg["at_or_above_reference"] == 1
    a = [_row("a", "skills", "PASSED", 1.2, 1e-5), _row("b", "skills", "PASSED", 1.1, 1e-5)]
    b = [_row("a", "ctrl", "PASSED", 1.0, 1e-5), _row("b", "ctrl", "PASSED", 1.0, 1e-5)]
    cmp = stats.compare(a, b, 0.1)
    assert cmp["ratio"] == pytest.approx(math.sqrt(1.2 * 1.1)) and cmp["verdict"] == "faster beyond the timing noise"
    noisy = [_row("a", "ctrl", "PASSED", 1.0, 0.05), _row("b", "ctrl", "PASSED", 1.0, 0.05)]
    assert stats.compare(a, noisy, 0.1)["verdict"] == "within the timing noise"
    same = [_row("a", "ctrl", "PASSED", 1.2, 1e-5, keys=["askills"]), _row("b", "ctrl", "PASSED", 1.1, 1e-5, keys=["bskills"])]
    assert stats.compare(a, same, 0.1) == {"instances": 2, "ratio": 1.0, "ci95": [1.0, 1.0],
                                           "verdict": "within the timing noise"}
    # a failure on one side is a fixed 0.1x, not a measurement
    failed = [_row("a", "ctrl", "FAILED"), _row("b", "ctrl", "FAILED")]
    assert stats.compare(a, failed, 0.1)["ratio"] == pytest.approx(math.sqrt(12 * 11))


# -- the memorization audit -------------------------------------------------------------------------------

def test_winnowing_similarity():
    src = (KERNELS / "rms_idiom.cu").read_text()
    assert similarity.similarity(src, src).jaccard == 1.0
    renamed = (src.replace("acc", "sum_sq").replace("partial", "warp_totals").replace("xr", "row_in")
               .replace("orow", "row_out").replace("rms_kernel", "norm_rows").replace("256", "128"))
    assert renamed != src and similarity.similarity(renamed, src).jaccard >= 0.9
    py = "def f(values):\n    return sorted(v * 2 for v in values if v > 3)\n\nclass Box:\n    size = 4\n" * 4
    assert similarity.similarity(src, py).jaccard == 0.0
    other = (ROOT / "expert_kernels" / "transpose" / "expert.cu").read_text()
    assert similarity.similarity(src, other).jaccard < 0.1
    assert similarity.tokens("int x = 3; // note\nfoo(__shfl_xor_sync);") == \
        ["int", "ID", "=", "NUM", ";", "ID", "(", "__shfl_xor_sync", ")", ";"]


def test_similarity_section_lists_every_produced_kernel(recorded, experts):
    sim = recorded["report"]["audit"]["similarity"]
    produced = {r["produced_hash"][:12] for r in _rows(recorded["report"]).values() if r.get("produced_hash")}
    assert {k["kernel"] for k in sim["per_kernel"]} == produced and sim["kernels"] == len(produced)
    assert sim["experts"] == len(list(experts.rglob("*.cu")))
    js = [p["jaccard"] for p in sim["top_pairs"]]
    assert js == sorted(js, reverse=True) and all(0 <= j < 0.5 for j in js)


def test_audit_proves_no_overlap_by_query(recorded):
    ov = recorded["report"]["audit"]["library_overlap"]
    assert ov["clean"] and len(ov["queries"]) == 6
    summ = recorded["report"]["summary"]  # nothing shared: the strict summary is the summary
    assert summ["strict"]["excluded"] == [] and summ["strict"]["overall"] == summ["overall"]
    assert summ["strict"]["comparisons"] == summ["comparisons"] and summ["strict"]["verdict"] == summ["verdict"]
    assert all(q["rows"] == [] and q["sql"].startswith("SELECT") and q["params"] for q in ov["queries"])
    names = ov["queries"][0]["params"]
    assert names == ["attn_tiny", "mm_tiny", "rms_tiny"]


def _plant_lineage(db: Path) -> None:
    """A library lineage that holds held-out material: the name rms_tiny, its idiom kernel stored
    from its held-out path, and a measured case of an fp32 reduction at rms_tiny's benchmark shape."""
    idiom = (KERNELS / "rms_idiom.cu").read_text()
    h = kernel_hash(idiom)
    store = open_store(db)
    try:
        store.put_kernel(h, idiom, "tests/heldout/fixtures/heldout/kernels/rms_idiom.cu")
        tr = {"transition_id": "t-planted", "step": 0, "richer_hash": h, "simpler_hash": "0" * 64, "mechanism": "unroll",
              "locus": "x", "eval_richer": "e1", "eval_simpler": "e2", "eval_rederived": "e3",
              "effects": [{"shape": {"rows": 4096, "cols": 1024}, "speedup": 1.0}]}
        for wname, lid in (("rms_tiny", "lin-a"), ("row_sum", "lin-b")):
            store.put_lineage({"lineage_id": lid, "workload_name": wname, "workload_hash": "w" * 64, "proposer": "rules",
                               "start_hash": h, "termination": "complete", "remaining": [], "config": {}, "missing": [],
                               "states": [{"idx": 0, "kernel_hash": h, "eval_key": None}],
                               "transitions": [dict(tr, transition_id=f"t-{lid}", lineage_id=lid)], "rejections": []})
    finally:
        store.close()


def test_audit_finds_a_planted_overlap(tmp_path, library, monkeypatch):
    _, out, report, _ = _run(tmp_path, library, monkeypatch, "--conditions", "idiom", before=_plant_lineage)
    ov = report["audit"]["library_overlap"]
    assert not ov["clean"]
    found = {q["check"]: q["rows"] for q in ov["queries"]}
    assert [r[1] for r in found["lineages of a held-out workload, by name"]] == ["rms_tiny"]
    assert len(found["lineage states holding a held-out kernel (start or produced), by source hash"]) == 2
    assert found["lineage kernels first stored from a held-out path"]
    assert found["lineages of a held-out workload, by content hash"] == []
    same = ov["cases"]["same_case"]
    assert [(c["instance"], c["library_workload"]) for c in same] == [("rms_tiny", "row_sum")]
    # the summary says what holds without the instance whose case the library measured
    summ = report["summary"]
    strict = summ["strict"]
    assert strict["excluded"] == ["rms_tiny"] and "reduction" in summ["families"]
    assert set(strict["families"]) == set(summ["families"]) - {"reduction"}
    assert strict["overall"]["idiom"]["instances"] == summ["overall"]["idiom"]["instances"] - 1
    text = (out / "heldout.txt").read_text()
    assert "strictly held out: without rms_tiny" in text and "same case: rms_tiny" in text


# -- replay and crash safety ---------------------------------------------------------------------------------

def _replay_cmd(db: Path, out: Path, records: Path) -> list[str]:
    return [sys.executable, "-c", "from klineage.cli import main; main()", "heldout", str(FIXTURES), "--db", str(db),
            "--out", str(out), "--replay", "--records", str(records), "--budget", str(BUDGET), "--seed", str(SEED)]


def test_replay_gives_the_same_report(recorded, tmp_path, library, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    db, out = tmp_path / "replay.duckdb", tmp_path / "replay_out"
    shutil.copy(library, db)
    r = CliRunner().invoke(main, ["heldout", str(FIXTURES), "--db", str(db), "--out", str(out), *ARGS, "--replay",
                                  "--records", str(recorded["records"])])
    assert r.exit_code == 0, r.output
    assert (out / "heldout.json").read_bytes() == (recorded["out"] / "heldout.json").read_bytes()
    assert (out / "heldout.txt").read_bytes() == (recorded["out"] / "heldout.txt").read_bytes()
    assert sorted(p.relative_to(out) for p in out.rglob("*.cu")) == \
        sorted(p.relative_to(recorded["out"]) for p in recorded["out"].rglob("*.cu"))
    # without the records nothing is invented: every row is MISSING and the command exits 4
    db2 = tmp_path / "empty.duckdb"
    shutil.copy(library, db2)
    r = CliRunner().invoke(main, ["heldout", str(FIXTURES), "--db", str(db2), "--out", str(tmp_path / "o2"), *ARGS,
                                  "--replay", "--conditions", "idiom,skills"])
    assert r.exit_code == 4, r.output
    missing = json.loads((tmp_path / "o2" / "heldout.json").read_text())["missing"]
    assert len(missing) == 6 and all("no recorded evaluation" in m["reason"] for m in missing)


def _state(db: Path) -> dict:
    """What a run leaves in the database, without clocks."""
    store = open_store(db)
    try:
        rows = [list(r) for r in store._query("SELECT run_id, instance, condition, status, record_json "
                                              "FROM heldout_results ORDER BY run_id, instance, condition")]
        runs = [list(r) for r in store._query("SELECT run_id, status, report_json FROM heldout_runs ORDER BY run_id")]
        steps = [list(r) for r in store._query("SELECT run_id, seq, record_json FROM apply_steps ORDER BY run_id, seq")]
        evals = [k for (k,) in store._query("SELECT eval_key FROM evaluations")]
        return {"rows": rows, "runs": runs, "steps": steps, "evals": evals}
    finally:
        store.close()


def test_a_killed_replay_resumes_to_the_same_result(recorded, tmp_path, library, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    ref_db, ref_out = tmp_path / "ref.duckdb", tmp_path / "ref_out"
    shutil.copy(library, ref_db)
    r = subprocess.run(_replay_cmd(ref_db, ref_out, recorded["records"]), cwd=ROOT, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    want = _state(ref_db)
    updates = r.stderr.count(b"\n")  # progress lines (plain off a terminal)
    assert updates > 20
    db, out = tmp_path / "killed.duckdb", tmp_path / "killed_out"
    shutil.copy(library, db)
    rng = random.Random(20261205)
    killed, partial = 0, 0
    for i in range(4):
        killed += run_until(_replay_cmd(db, out, recorded["records"]), {**os.environ, "PYTHONPATH": str(ROOT)}, ROOT,
                           rng.randint(1, updates - 1), rng.uniform(0, 0.03))
        got = _state(db)  # opens cleanly after every kill
        keys = [(row[0], row[1], row[2]) for row in got["rows"]]
        assert len(keys) == len(set(keys)) and len(got["evals"]) == len(set(got["evals"]))
        for row in got["rows"]:  # every decided row is the uninterrupted run's row
            if row[3] in ("PASSED", "FAILED"):
                assert row in want["rows"], f"kill {i}: row {row[:3]} differs"
        partial += 0 < sum(row[3] in ("PASSED", "FAILED") for row in got["rows"]) < 12
    assert killed >= 3 and partial
    r = subprocess.run(_replay_cmd(db, out, recorded["records"]), cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    got = _state(db)
    assert got["rows"] == want["rows"] and got["runs"] == want["runs"] and got["steps"] == want["steps"]
    assert sorted(got["evals"]) == sorted(want["evals"])
    assert (out / "heldout.json").read_bytes() == (ref_out / "heldout.json").read_bytes() == \
        (recorded["out"] / "heldout.json").read_bytes()


# -- the command and its pipeline ---------------------------------------------------------------------------

def test_dry_run_shows_the_plan_and_evaluates_nothing(tmp_path, library, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    db = tmp_path / "dry.duckdb"
    shutil.copy(library, db)
    r = CliRunner().invoke(main, ["heldout", str(FIXTURES), "--db", str(db), "--dry-run", "--json", "--families",
                                  "gemm,reduction"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    assert [i["instance"] for i in plan["instances"]] == ["mm_tiny", "rms_tiny"]
    assert plan["instances"][0]["tunables"] == {"MM_BLOCK": 256, "MM_UNROLL": 1}
    assert plan["library"]["foreign"]["reduction"] == ["gemm_cfg/block-unroll"]
    assert "ANTHROPIC_API_KEY" in plan["llm"]
    store = open_store(db)
    try:
        assert store.counts()["evaluations"] == 0 and store.heldout_runs() == []
    finally:
        store.close()
    r = CliRunner().invoke(main, ["heldout", str(FIXTURES), "--db", str(db), "--out", str(tmp_path / "o"),
                                  "--conditions", "idiom,magic"])
    assert r.exit_code == 2 and "magic" in r.output
    r = CliRunner().invoke(main, ["heldout", str(FIXTURES), "--db", str(db), "--dry-run", "--instances", "nope"])
    assert r.exit_code == 2 and "no instance 'nope'" in r.output


def test_dry_run_lists_the_first_sweep_round_the_run_then_gates(recorded, tmp_path, library, monkeypatch):
    """The plan's first sweep round per searching condition: skills led by the reduction card's
    values, control-foreign by the gemm card's, control-random's seeded draws; the same
    points, in order, that the recorded run's sweep arms gated first."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    db = tmp_path / "dry.duckdb"
    shutil.copy(library, db)
    r = CliRunner().invoke(main, ["heldout", str(FIXTURES), "--db", str(db), "--dry-run", "--json", *ARGS[:4]])
    assert r.exit_code == 0, r.output
    plan = {i["instance"]: i["first_sweep_round"] for i in json.loads(r.output)["instances"]}
    assert plan["rms_tiny"]["skills"][0] == {"RMS_BLOCK": 512, "RMS_UNROLL": 1}  # the reduction card's block
    assert {"RMS_BLOCK": 256, "RMS_UNROLL": 8} in plan["rms_tiny"]["skills"]        # and its unroll
    assert plan["rms_tiny"]["control-foreign"][0]["RMS_BLOCK"] == 128
    rows = _rows(recorded["report"])
    for inst in ("rms_tiny", "mm_tiny"):
        assert plan[inst]["control-random"] == random_points(_idiom(inst), BUDGET, random_seed(SEED, inst))[1:]
        for cond in ("skills", "control-foreign", "control-random"):
            arm = rows[(inst, cond)]["arms"][0]
            gated = [st["config"] for st in arm["steps"] if st["backend"] == "sweep"]
            want = plan[inst][cond][:len(gated)]
            assert gated[:len(want)] == want, (inst, cond)
    r = CliRunner().invoke(main, ["heldout", str(FIXTURES), "--db", str(db), "--dry-run", "--instances", "rms_tiny"])
    assert r.exit_code == 0 and "first sweep round, skills (RMS_BLOCK, RMS_UNROLL): 512,1;" in r.output


def test_the_shipped_plan_needs_no_nvcc_where_its_front_end_answers_are_recorded(tmp_path, monkeypatch):
    """pipelines/heldout.toml sweeps the axes a kernel builds; the plan's front-end answers are
    recorded in its records folder (benchmarks/heldout_h200.py --front-end-answers), so its dry run
    (and a replay) picks the axes where no nvcc is. Fails when a held-out kernel changed and the
    answers were not written again."""
    import klineage.gate.compile as compile_mod
    monkeypatch.setattr(compile_mod, "_FE_RECORDED", {})
    monkeypatch.setattr(compile_mod, "nvcc_version", lambda nvcc="nvcc": "")
    db = tmp_path / "lib.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    r = CliRunner().invoke(main, ["heldout", "--config", str(ROOT / "pipelines" / "heldout.toml"), "--db", str(db),
                                  "--dry-run", "--json"])
    assert r.exit_code == 0, ("write the plan's answers again: python benchmarks/heldout_h200.py --front-end-answers "
                              "benchmarks/results/heldout_h200/heldout_h200_plan.front_end.json.gz\n" + r.output[-2000:])
    plan = {i["instance"]: i for i in json.loads(r.output)["instances"]}
    assert len(plan) == 22
    assert list(plan["attn_causal_b4_s1024"]["sweep_space"]) == ["ATTN_BLOCK_M", "ATTN_BLOCK_N", "ATTN_WARPS",
                                                                 "ATTN_STAGES"]
    assert len(plan["mm_4096"]["sweep_space"]) == 3 and len(plan["rmsnorm_16384x4096"]["sweep_space"]) == 2
    for i in plan.values():
        assert len(i["first_sweep_round"]["skills"]) == 6, i["instance"]


def test_pipeline_file_and_run_command(recorded, tmp_path, library, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    pl = load_pipeline(ROOT / "pipelines" / "heldout.toml")
    assert pl.kind == "heldout" and pl.run.root == ROOT / "heldout" and pl.run.config.budget == 12
    assert pl.run.config.foreign["reduction"] == ("attention", "convolution", "gemm", "linear_attention")
    d = tmp_path / "pipelines"
    d.mkdir()
    (tmp_path / "fixtures").symlink_to(FIXTURES)
    (tmp_path / "records").symlink_to(recorded["records"])
    p = d / "h.toml"
    p.write_text(f'kind = "heldout"\nname = "t"\n[heldout]\nroot = "fixtures"\nbudget = {BUDGET}\nseed = {SEED}\n'
                 'records = "records"\nout = "out"\n')
    db = tmp_path / "p.duckdb"
    shutil.copy(library, db)
    r = CliRunner().invoke(main, ["run", str(p), "--db", str(db), "--replay"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "heldout.json").read_bytes() == (recorded["out"] / "heldout.json").read_bytes()
    store = open_store(db)
    try:
        (rec,) = store.pipeline_runs()
        assert rec["kind"] == "heldout" and rec["outcome"] == "ok"
    finally:
        store.close()
    p.write_text('kind = "heldout"\n[heldout]\nbudjet = 3\n')
    r = CliRunner().invoke(main, ["run", str(p), "--db", str(db)])
    assert r.exit_code != 0 and "unknown key heldout.budjet" in r.output


H200 = ROOT / "benchmarks" / "results" / "heldout_h200"


def _record_folder(recorded, tmp_path: Path) -> Path:
    """The module's reference run as a records folder: its evaluations, its library record and its report."""
    rec = tmp_path / "records"
    shutil.copytree(recorded["records"], rec)
    (rec / "report").mkdir()
    shutil.copy(recorded["out"] / "heldout.json", rec / "report" / "heldout.json")
    store = open_store(recorded["db"])
    try:
        write_library_record(store, rec / f"scripted{LIBRARY_SUFFIX}")
    finally:
        store.close()
    return rec


def test_a_replay_adopts_the_recorded_library_and_saves_the_databases_own(recorded, tmp_path, library, monkeypatch):
    """The library changed after the run (a skill dropped here): the replay takes the library the record
    names, writes the database's own beside it first, gives the recorded report and says it matches."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    rec = _record_folder(recorded, tmp_path)
    db = tmp_path / "changed.duckdb"
    shutil.copy(library, db)
    store = open_store(db)
    try:
        before = store.canonical_dump()
        store.put_skills(store.skills()[1:])
        changed = store.library_hash()
    finally:
        store.close()
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["heldout", str(FIXTURES), "--db", str(db), "--out", str(out), *ARGS, "--replay",
                                  "--records", str(rec)])
    assert r.exit_code == 0, r.output
    assert (out / "heldout.json").read_bytes() == (recorded["out"] / "heldout.json").read_bytes()
    assert f"the replay uses the recorded library {recorded['report']['library']['hash'][:16]}" in r.output
    backup = tmp_path / f"changed.duckdb.library-{changed[:16]}.json.gz"
    assert str(backup) in r.output
    saved = json.loads(gzip.decompress(backup.read_bytes()))
    assert saved["hash"] == changed and len(saved["dump"]["skills"]) == len(before["skills"]) - 1
    chk = json.loads((out / "replay_check.json").read_text())
    assert chk["same"] and chk["rows"] == len(_rows(recorded["report"]))
    assert "replay check: the replay gives the recorded report" in r.output
    store = open_store(db)
    try:
        assert store.canonical_dump() == before  # the recorded library is the library the run measured
    finally:
        store.close()


def test_a_replay_whose_search_decides_otherwise_says_where_and_why(recorded, tmp_path, library, monkeypatch):
    """Later code that takes other decisions on the same records (here: the random control draws from
    another stream) leaves the recorded report as it is and lists the rows that diverge, with the first
    search step that differs."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    rec = _record_folder(recorded, tmp_path)
    import klineage.heldout.run as run_mod
    monkeypatch.setattr(run_mod, "random_seed", lambda seed, instance: random_seed(seed + 1, instance))
    db, out = tmp_path / "d.duckdb", tmp_path / "out"
    shutil.copy(library, db)
    r = CliRunner().invoke(main, ["heldout", str(FIXTURES), "--db", str(db), "--out", str(out), *ARGS, "--replay",
                                  "--records", str(rec)])
    assert r.exit_code in (0, 4), r.output
    chk = json.loads((out / "replay_check.json").read_text())
    assert not chk["same"]
    assert {d["condition"] for d in chk["diverged"]} == {"control-random"}
    assert all(d["why"] for d in chk["diverged"])
    # where the random control has points to draw, its search differs from its first step (or the
    # replay lacks the records it now asks for); attn_tiny has none, only its seeded run id differs
    whys = {d["instance"]: d["why"] for d in chk["diverged"]}
    for inst in ("rms_tiny", "mm_tiny"):
        assert any(w.startswith("status PASSED recorded, MISSING replayed") or
                   w.startswith("the search first differs at random step 1") for w in whys[inst]), whys[inst]
    assert whys["attn_tiny"] == ["arm random: apply_run differ"]
    assert "the recorded report stays the record of what was measured" in r.output
    assert (rec / "report" / "heldout.json").read_bytes() == (recorded["out"] / "heldout.json").read_bytes()


def test_recorded_h200_run_replays_to_its_report(tmp_path):
    """The H200 run's records, replayed on this machine from another folder with the documented
    command, give the committed report byte for byte, and the replay checks itself against it."""
    want = H200 / "report"
    rep = json.loads((want / "heldout.json").read_text())
    assert rep["environment"] and all(e["gpu"] == "NVIDIA H200" for e in rep["environment"])
    assert len(rep["instances"]) == 22 and not rep["missing"]
    db = tmp_path / "lib.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _klineage(["heldout", "--config", str(ROOT / "pipelines" / "heldout.toml"), "--db", str(db), "--replay",
                   "--out", str(tmp_path / "out"), "--quiet"], elsewhere)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "out" / "heldout.txt").read_bytes() == (want / "heldout.txt").read_bytes()
    assert (tmp_path / "out" / "heldout.json").read_bytes() == (want / "heldout.json").read_bytes()
    assert json.loads((tmp_path / "out" / "replay_check.json").read_text())["same"]
    assert "replay check: the replay gives the recorded report (110 rows" in r.stderr


def test_recorded_h200_run_replays_as_a_pipeline_on_a_fresh_clone(tmp_path):
    """`klineage run pipelines/heldout.toml --db COPY --replay` on a fresh clone, from another folder,
    with a library that changed since the run: the recorded library is adopted, the committed report
    comes back byte for byte, and the HTML report's held-out page shows it."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=600)
    db = tmp_path / "copy.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    store = open_store(db)
    try:
        store.put_skills(store.skills()[:-1])  # a later library than the one the run measured
    finally:
        store.close()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _klineage(["run", str(clone / "pipelines" / "heldout.toml"), "--db", str(db), "--replay", "--quiet"],
                  elsewhere, clone)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "the replay uses the recorded library" in r.stderr
    out = clone / "out" / "heldout"
    for name in ("heldout.txt", "heldout.json"):
        assert (out / name).read_bytes() == (clone / "benchmarks" / "results" / "heldout_h200" / "report" / name
                                             ).read_bytes(), name
    assert "pipeline run" in r.stdout and ": ok" in r.stdout
    site = tmp_path / "site"
    r = _klineage(["report", "--db", str(db), "--out", str(site)], elsewhere, clone)
    assert r.returncode == 0, r.stderr[-3000:]
    page = (site / "heldout.html").read_text()
    rep = json.loads((clone / "benchmarks" / "results" / "heldout_h200" / "report" / "heldout.json").read_text())
    assert rep["run_id"] in page
    for fam, agg in rep["summary"]["families"].items():
        assert f"{agg['skills']['geomean']:.3f}x" in page, fam


def _search_row(instance, condition, kernel, points, steered=(), status="PASSED"):
    steps = [{"backend": "sweep", "config": p, "steered_by": list(steered) if i == 0 else []}
             for i, p in enumerate(points)]
    steps.append({"backend": "rules", "skill": "unroll/loop", "status": "NO_REWRITE"})
    return {"instance": instance, "condition": condition, "family": "reduction", "status": status,
            "kernel_hash": kernel, "flags": [], "arms": [{"arm": "sweep", "start": "idiom", "steps": steps}]}


def test_the_report_sets_idiom_and_skills_beside_the_published_check(recorded):
    """summary.published: the published 1.07x / 1.12x and 14 / 16 of 22 beside this run's geomeans;
    comparable only when all 22 instances were counted (the fixture run has 3), and the text says so."""
    from klineage.heldout.report import against_published
    pub = recorded["report"]["summary"]["published"]
    assert pub["published"]["geomean"] == {"idiom": 1.07, "skills": 1.12} and pub["published"]["instances"] == 22
    overall = recorded["report"]["summary"]["overall"]
    assert pub["ours"]["skills"]["geomean"] == overall["skills"]["geomean"] and pub["ours"]["skills"]["instances"] == 3
    assert pub["ratio_to_published"]["skills"] == pytest.approx(overall["skills"]["geomean"] / 1.12)
    assert not pub["comparable"] and "3 of the 22" in pub["why_not_comparable"]
    text = (recorded["out"] / "heldout.txt").read_text()
    assert "== against the published check" in text and "comparable: no" in text
    agg = {"passed": 21, "failed": 1, "geomean": 1.0, "geomean_success_only": 1.05, "at_or_above_reference": 12}
    full = against_published({"overall": {"idiom": agg, "skills": {**agg, "geomean": 1.232}}, "families": {}})
    assert full["comparable"] and full["why_not_comparable"] is None
    assert full["ratio_to_published"] == pytest.approx({"idiom": 1.0 / 1.07, "skills": 1.1})


def test_retrieval_effect_counts_what_the_library_changed_against_control_foreign():
    """skills against control-foreign: the same final kernel is counted, and only the sweep points
    control-foreign did not gate on that instance and start count as the library's own."""
    from klineage.heldout.report import retrieval_effect
    a, b, c = {"T": 128}, {"T": 512}, {"T": 64, "I": 2}
    rows = [_search_row("x", "skills", "k1", [a, b], steered=["coarsening/per-thread-count"]),
            _search_row("x", "control-foreign", "k1", [a, b]),
            _search_row("y", "skills", "k2", [a, c]),
            _search_row("y", "control-foreign", "k3", [a, b]),
            _search_row("z", "skills", "k4", [c]),
            _search_row("z", "control-foreign", None, [], status="MISSING")]
    got = retrieval_effect(rows)
    assert got == {"reduction": {"instances": 2, "same_final_kernel": 1, "points": 4, "not_in_foreign": 1,
                                 "steered": 1}}
    # a point gated from another start is not the same point
    rows[1]["arms"][0]["start"] = "naive"
    assert retrieval_effect(rows)["reduction"]["not_in_foreign"] == 3


def test_sweep_rounds_come_from_the_pipeline_and_must_be_positive(tmp_path):
    from klineage.pipelines import PipelineError, load_pipeline
    from klineage.heldout.run import HeldoutConfig
    p = tmp_path / "h.toml"
    p.write_text('kind = "heldout"\n[heldout]\nsweep_rounds = 3\n')
    cfg = load_pipeline(p).run.config
    assert cfg.sweep_rounds == 3 and cfg.to_dict()["sweep_rounds"] == 3
    assert "sweep_rounds" not in HeldoutConfig().to_dict()   # reports of one-round runs are unchanged
    p.write_text('kind = "heldout"\n[heldout]\nsweep_rounds = 0\n')
    with pytest.raises((PipelineError, ValueError)) as e:
        load_pipeline(p)
    assert "sweep_rounds >= 1" in str(e.value)
