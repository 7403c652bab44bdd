"""The baselines in our harness, through the real SDK against a local scripted server and the
scripted gate (a test double: latencies are a function of the kernel text): each method runs to its
budget with the same trajectory records as apply; adaexplore's failure rules enter the prompt at
score >= 3; accelopt's memory of slow -> fast pairs; expert-source puts the experts in the prompt."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import anthropic
import pytest
from click.testing import CliRunner

from klineage.apply.baselines import RULE_MIN, run_baseline
from klineage.apply.llm import LLMMaterializer
from klineage.llm import AnthropicBackend
from klineage.cli import main
from klineage.gate.gate import Status
from klineage.store import open_store
from klineage.workload import load_workload

from tests.apply.test_llm import FakeSleep, Server, anthropic_reply
from tests.lineage.test_walk import ScriptedGate

ROOT = Path(__file__).resolve().parents[2]
GELU = ROOT / "apply_workloads" / "gelu"
START = (GELU / "naive.cu").read_text()


def k(tag: str) -> str:
    return START + f"\n// {tag}\n"


def fenced(src: str) -> str:
    return f"```cuda\n{src}```\n"


@pytest.fixture
def env(tmp_path):
    server = Server()
    db = tmp_path / "lib.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    store = open_store(db)
    yield server, store
    store.close()
    server.close()


def _llm(server, budget=10.0):
    client = anthropic.Anthropic(api_key="test-key", base_url=server.url, max_retries=0)
    return LLMMaterializer(AnthropicBackend(client=client, sleep=FakeSleep()), budget_usd=budget)


def _gate():
    # "// fastN" kernels are faster the larger N; "// broken" ones fail
    def lat(src):
        import re
        m = re.search(r"// fast(\d+)", src)
        return 100.0 / (1 + int(m.group(1))) if m else 100.0
    return ScriptedGate(latency=lat, verdict=lambda src: Status.INCORRECT if "// broken" in src else Status.PASSED)


@pytest.mark.parametrize("method", ["none", "accelopt", "expert-source", "adaexplore"])
def test_each_method_runs_and_keeps_only_faster_kernels(env, method):
    server, store = env
    for text in (fenced(k("fast1")), "no kernel here", fenced(k("broken")), fenced(k("fast3"))):
        server.script.append(anthropic_reply(text))
    run = run_baseline(method, store, _gate(), load_workload(GELU), START, "naive.cu", _llm(server), max_iters=4)
    assert run["stop_reason"] == "budget_steps"
    assert [s["status"] for s in run["steps"]] == ["PASSED", "PASSED", "NO_KERNEL", "INCORRECT", "PASSED"]
    assert [s["accepted"] for s in run["steps"][1:]] == [True, False, False, True]
    assert "// fast3" in run["best_source"]
    again = store.get_apply_run(run["run_id"])  # the same trajectory records as apply
    assert again["config"]["method"] == method and len(again["steps"]) == 5
    prompts = [r["body"]["messages"][0]["content"] for r in server.requests]
    assert "The last attempt: INCORRECT" in prompts[3]  # gate feedback reaches the next call
    system = server.requests[0]["body"]["system"][0]["text"]
    assert ("Expert kernels for other operators" in system) == (method == "expert-source")
    if method == "accelopt":
        assert "Earlier improvements on this kernel" in prompts[1] and "faster after changing" in prompts[1]


def test_adaexplore_rules_enter_the_prompt_at_score_three(env):
    server, store = env
    for _ in range(RULE_MIN):
        server.script.append(anthropic_reply(fenced(k("broken"))))
    server.script.append(anthropic_reply(fenced(k("fast1"))))
    run = run_baseline("adaexplore", store, _gate(), load_workload(GELU), START, "naive.cu", _llm(server),
                       max_iters=RULE_MIN + 1)
    prompts = [r["body"]["messages"][0]["content"] for r in server.requests]
    assert all("Rules learned" not in p for p in prompts[:RULE_MIN])
    assert "Rules learned from failed attempts" in prompts[RULE_MIN] and "You cannot submit a kernel" in prompts[RULE_MIN]
    assert list(run["summary"]["rules"].values()) == [RULE_MIN]
    assert [s.get("action") for s in run["steps"][1:]] == ["edit", "rewrite", "edit", "rewrite"]


def test_a_kernel_without_a_record_is_a_step_and_apply_list_reads_the_run(env):
    server, store = env
    for text in (fenced(k("fast1")), fenced(k("unrecorded")), fenced(k("fast2"))):
        server.script.append(anthropic_reply(text))
    gate = _gate()
    gate.missing = lambda src: "// unrecorded" in src  # a replay with no record of this kernel
    run = run_baseline("none", store, gate, load_workload(GELU), START, "naive.cu", _llm(server), max_iters=3)
    assert [s["status"] for s in run["steps"]] == ["PASSED", "PASSED", "NOT_REPLAYED", "PASSED"]
    assert run["summary"]["missing"] == [run["steps"][2]["kernel_hash"]]
    assert run["summary"]["kept"] == [f"step {s['seq']} {s['kernel_hash'][:12]}" for s in run["steps"] if s["seq"] in (1, 3)]
    assert run["summary"]["calls"] == 3
    path = store.path
    store.close()
    r = CliRunner().invoke(main, ["apply", "list", "--db", str(path)])
    assert r.exit_code == 0, r.output
    line = next(l for l in r.output.splitlines() if l.startswith(run["run_id"]))
    assert line.split()[1] == "gelu" and line.split()[3] == "2"  # workload, kept


def test_budget_stops_a_baseline_before_sending(env):
    server, store = env
    run = run_baseline("none", store, _gate(), load_workload(GELU), START, "naive.cu", _llm(server, budget=0.0001))
    assert run["stop_reason"] == "budget_usd" and not server.requests


def test_baseline_cli_dry_run_and_missing_key(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    base = ["baseline", "run", "--workload", str(GELU), "--start", str(GELU / "naive.cu"), "--budget-usd", "1",
            "--db", str(tmp_path / "x.duckdb")]
    for method in ("none", "adaexplore", "accelopt", "expert-source"):
        r = CliRunner().invoke(main, [*base, "--method", method, "--dry-run", "--json"])
        assert r.exit_code == 0, r.output
        d = json.loads(r.output)
        assert "The current kernel" in d["prompt"] and d["estimate"]["usd_max"] > 0
    r = CliRunner().invoke(main, [*base, "--method", "none"])
    assert r.exit_code != 0 and "ANTHROPIC_API_KEY" in r.output and not (tmp_path / "x.duckdb").exists()
