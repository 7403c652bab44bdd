"""The llm proposer and the baselines end to end (benchmarks/llm_h200.py), against the scripted server.

- The scripts written from swiglu's ladder walk it from expert.cu to naive.cu through the real SDK,
  the real LLMProposer and Walker (a scripted gate: no GPU), each wrong answer rejected where it should be.
- The benchmark with --dry-run sends nothing and prints a prompt and an estimate for every command.
- The benchmark with --replay on this machine: the whole chain of CLI commands from the H200 run's
  recorded evaluations (benchmarks/results/llm_h200.jsonl.gz), rebuilding that run's lineage and
  trajectories decision for decision; a missing or empty record fails.
- The recorded H200 run (benchmarks/results/llm_h200.json): the lineage
  reached naive.cu live on the GPU, every method has a measured trajectory that `apply show` and the
  report read, and the two cost accounts agree.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import anthropic
import pytest

from klineage.apply.llm import LLMMaterializer
from klineage.llm import AnthropicBackend
from tests.support.scripted_server import ScriptedServer, baseline_script, mine_script
from klineage.gate.gate import Status, kernel_hash
from klineage.lineage.llm_proposer import check_citations, parse_proposal
from klineage.lineage.proposers import ladder_from_folder, make_proposer
from klineage.lineage.walk import Limits, Walker
from klineage.workload import load_workload

from tests.apply.test_llm import FakeSleep
from tests.lineage.test_walk import ScriptedGate

ROOT = Path(__file__).resolve().parents[1]
SWIGLU = ROOT / "expert_kernels" / "swiglu"
RESULTS = ROOT / "benchmarks" / "results"
RECORD = RESULTS / "llm_h200.json"
# its evaluations (never in skills_db/evaluations: the corpus replay reads those)
RECORDED_EVALS = RESULTS / "llm_h200.jsonl.gz"
RECORD_IT = "record it: python benchmarks/llm_h200.py --out DIR on the H200 (one device call), then copy DIR/llm_h200.*"
sys.path.insert(0, str(ROOT / "benchmarks"))
import llm_h200  # noqa: E402

# The steps down swiglu's ladder as the walk labels them: with what the evidence reads (source forms and
# the compiler's), rung 04 adds a scalar grid-stride fallback (a form of coarsening no rule takes off)
# with its vector access, so that step is labelled with both. The H200 run labelled steps before the
# walk read that evidence: its record names the rung's declaration alone (RECORDED_LADDER_DOWN); the
# kernels, the evaluations and the decisions are the same.
LADDER_DOWN = ["unroll", "coarsening", "cache_hint", "coarsening+vector_access", "fast_math", "launch_bounds", "restrict"]
RECORDED_LADDER_DOWN = ["unroll", "coarsening", "cache_hint", "vector_access", "fast_math", "launch_bounds", "restrict"]


def test_mine_script_walks_the_ladder_to_naive():
    script = mine_script(SWIGLU)
    ladder = ladder_from_folder(SWIGLU)
    assert script["expect"]["mechanisms"] == LADDER_DOWN
    for r in script["replies"]:
        if r["note"] == "step":  # each step's citations are real lines its edit changes
            obj = parse_proposal(r["text"])
            rich = next(v for v in ladder if v.mechanism == obj["mechanism"])
            assert check_citations(rich.source, obj["kernel"], obj["evidence_lines"]) is None
    server = ScriptedServer(script["replies"], script["default"])
    try:
        client = anthropic.Anthropic(api_key="fake", base_url=server.url, max_retries=0)
        llm = LLMMaterializer(AnthropicBackend(client=client, sleep=FakeSleep()), budget_usd=2.0)
        gate = ScriptedGate(verdict=lambda src: Status.COMPILE_ERROR if "scripted compile error" in src else Status.PASSED)
        lin = Walker(gate, load_workload(SWIGLU), [make_proposer("llm", SWIGLU, llm=llm)], Limits()).run(
            (SWIGLU / "expert.cu").read_text(), origin="expert.cu")
    finally:
        server.close()
    assert [t["mechanism"] for t in lin["transitions"]] == LADDER_DOWN
    assert lin["termination"] == "complete" and lin["remaining"] == []
    assert lin["states"][-1]["kernel_hash"] == kernel_hash((SWIGLU / "naive.cu").read_text())
    assert [r["kind"] for r in lin["rejections"]] == ["not_applicable", "audit", "not_applicable", "compile_error"]
    assert "llm_parse" in lin["rejections"][0]["message"] and "do not exist" in lin["rejections"][2]["message"]
    assert server.unused() == [] and not any(r["reply"] == "default" for r in server.requests)
    assert all(t["rederived_identical"] for t in lin["transitions"])  # the forward answer is the rung itself


def test_baseline_scripts_tag_their_kernels_and_mix_in_wrong_answers():
    sc = baseline_script(SWIGLU, "none", [2, "malformed", "compile:3", "guard:4", 7])
    assert [r["note"] for r in sc["replies"]] == ["02_launch_bounds", "malformed", "compile", "guard", "expert"]
    texts = [r["text"] for r in sc["replies"]]
    assert "// baseline none, answer 1" in texts[0] and "```" not in texts[1]
    assert "static_assert(sizeof(float) == 0" in texts[2] and "cudaDeviceSynchronize();" in texts[3]


def test_dry_run_sends_nothing_and_prints_every_prompt(tmp_path):
    rc = llm_h200.main(["--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--dry-run"])
    d = json.loads((tmp_path / "out" / "llm_h200.json").read_text())
    assert rc == 0, d["checks"]
    assert d["checks"] == {"finished": True, "nothing_sent": True, "every_dry_run_printed": True, "key_in_outputs": False}
    assert d["mine"]["dry_run"]["estimate"]["usd_max"] > 0
    assert set(d["baselines"]) == {"none", "adaexplore", "accelopt", "expert-source"}
    # expert-source carries the other experts' sources in its prompt
    assert d["baselines"]["expert-source"]["dry_run"]["prompt_chars"] > 5 * d["baselines"]["none"]["dry_run"]["prompt_chars"]


@pytest.mark.nvcc
def test_replay_runs_every_command_end_to_end(tmp_path):
    """Every command through the CLI from the H200 run's recorded evaluations (the gate compiles each
    kernel, then reads its record), rebuilt decision for decision."""
    for f in (RECORD, RECORDED_EVALS):
        assert f.is_file() and f.stat().st_size > 0, f"{f.name} is missing or empty: {RECORD_IT}"
    args = ["--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--replay", "--import", str(RECORDED_EVALS)]
    rc = llm_h200.main(args)
    d = json.loads((tmp_path / "out" / "llm_h200.json").read_text())
    assert rc == 0, d["checks"]
    assert all(v for k, v in d["checks"].items() if k != "key_in_outputs") and not d["checks"]["key_in_outputs"]
    lin = d["mine"]["lineage"]
    assert [s["mechanism"] for s in lin["steps"]] == LADDER_DOWN and lin["reached_naive"]
    assert d["mine"]["summary"]["evaluations"]["by_source"].get("live", 0) == 0  # nothing measured here
    for method, b in d["baselines"].items():
        steps = b["run"]["steps"]
        assert steps[0]["kind"] == "start" and steps[0]["status"] == "PASSED", method  # the naive kernel's record
        assert b["apply_show"]["same_steps"]
    rec = json.loads(RECORD.read_text())
    assert [s["simpler_hash"] for s in lin["steps"]] == [s["simpler_hash"] for s in rec["mine"]["lineage"]["steps"]]
    assert [r["kind"] for r in lin["rejections"]] == [r["kind"] for r in rec["mine"]["lineage"]["rejections"]]
    for method, b in d["baselines"].items():
        want = rec["baselines"][method]["run"]
        got = [(s["status"], s["accepted"]) for s in b["run"]["steps"]]
        exp = [(s["status"], s["accepted"]) for s in want["steps"]]
        if method == "expert-source":  # its prompt holds the corpus's experts: their size sets when the budget ends
            got, exp = got[:min(len(got), len(exp))], exp[:min(len(got), len(exp))]
        else:
            assert not b["run"]["summary"]["missing"], method
        assert got == exp and b["run"]["stop_reason"] == want["stop_reason"], method


def test_the_llm_run_records_stay_out_of_the_corpus_records():
    """skills_db/evaluations is what every --replay imports: the llm run re-measures the ladder with the
    corpus's settings, so its newer records there would replace the corpus run's in the shipped replay."""
    assert not list((ROOT / "skills_db" / "evaluations").glob("llm_h200*"))


@pytest.fixture(scope="module")
def record():
    assert RECORD.is_file() and RECORD.stat().st_size > 0, f"{RECORD.name} is missing or empty: {RECORD_IT}"
    return json.loads(RECORD.read_text())


def test_recorded_h200_lineage_reached_naive_live(record):
    assert record["mode"] == "live" and "H200" in (record["env"]["gate"] or {}).get("gpu", "")
    mine = record["mine"]
    assert mine["rc"] == 0 and mine["summary"]["evaluations"]["by_source"].get("live", 0) >= len(LADDER_DOWN) + 1
    lin = mine["lineage"]
    assert lin["start_is_expert"] and lin["reached_naive"] and lin["termination"] in ("complete", "no_proposal")
    assert [s["mechanism"] for s in lin["steps"]] == RECORDED_LADDER_DOWN
    assert all(s["forward_speedups"] for s in lin["steps"])  # measured on every benchmark shape
    assert [r["kind"] for r in lin["rejections"]] == ["not_applicable", "audit", "not_applicable", "compile_error"]
    assert mine["server"]["unused_replies"] == [] and mine["server"]["prompts_with"]["walk_feedback"] >= 4
    assert abs(mine["summary"]["llm"]["spent_usd"] - mine["server"]["cost_usd"]) < 1e-5


def test_recorded_h200_baselines_have_measured_trajectories(record):
    assert set(record["baselines"]) == {"none", "adaexplore", "accelopt", "expert-source"}
    for method, b in record["baselines"].items():
        run = b["run"]
        assert b["rc"] == 0 and not run["summary"]["missing"], method
        statuses = [s["status"] for s in run["steps"]]
        assert statuses[0] == "PASSED" and statuses.count("PASSED") >= 2, method
        assert any(s["latency_us"] and s["kind"] == "candidate" for s in run["steps"]), method
        assert set(statuses) - {"PASSED"}, method  # the wrong answers became failed steps with feedback
        assert b["apply_show"]["same_steps"] and b["apply_show"]["stop_reason"] == run["stop_reason"]
        assert abs(run["summary"]["spent_usd"] - b["server"]["cost_usd"]) < 1e-5 and b["server"]["auth_sent"]
        assert b["server"]["prompts_with"]["gate_feedback"] >= 1
    bl = record["baselines"]
    assert bl["expert-source"]["run"]["stop_reason"] == "budget_usd" and bl["expert-source"]["api"] == "openai"
    assert bl["expert-source"]["server"]["prompts_with"]["experts"] == bl["expert-source"]["server"]["calls"]
    assert bl["adaexplore"]["server"]["prompts_with"]["rules"] >= 1
    assert max(bl["adaexplore"]["run"]["summary"]["rules"].values()) >= 3


def test_recorded_h200_run_is_read_by_apply_list_and_report(record):
    runs = {b["run"]["run_id"] for b in record["baselines"].values()}
    assert set(record["apply_list"]["runs"]) == runs
    assert record["report"]["rc"] == 0 and record["report"]["llm_lineage_page"]
    assert all(record["checks"][k] for k in record["checks"] if k != "key_in_outputs")
    assert record["checks"]["key_in_outputs"] is False
    assert record["exported_evaluations"] > 0 and RECORDED_EVALS.is_file()
    assert record["wall_s"] < 300
