"""The llm proposer through the real Anthropic SDK against a local scripted server (answers scripted
from row_sum's version ladder), walked by the real Walker with a scripted gate (a test double: its
latencies are a function of the kernel text): a valid step, a step that removes two mechanisms
(audit), citations of lines that do not exist, a re-derivation too slow, malformed JSON, the budget
stop, and the dry-run prompt."""
from __future__ import annotations

import json
from pathlib import Path

import anthropic
import pytest

from klineage.apply.llm import LLMMaterializer
from klineage.llm import AnthropicBackend
from klineage.lineage.llm_proposer import LLMProposalError, check_citations, numbered, parse_proposal
from klineage.lineage.proposers import make_proposer, ProposerError
from klineage.lineage.walk import Limits, Walker
from klineage.workload import load_workload

from tests.apply.test_llm import FakeSleep, Server, anthropic_reply
from tests.lineage.test_walk import ScriptedGate

ROOT = Path(__file__).resolve().parents[2]
RS = ROOT / "expert_kernels" / "row_sum"
V = RS / "versions"
RICH = (V / "08_unroll.cu").read_text()
ONE_LESS = (V / "07_ilp.cu").read_text()       # 08 without #pragma unroll
TWO_LESS = (V / "05_warp_shuffle.cu").read_text()  # also without the coarsening count and the float4 loads


def _pragma_lines(src: str) -> list[list[int]]:
    return [[i, i] for i, ln in enumerate(src.splitlines(), start=1) if ln.strip() == "#pragma unroll"]


def answer(kernel: str, mechanism="unroll", lines=None, **over) -> str:
    obj = {"mechanism": mechanism, "locus": "row_sum_warp_kernel:loops", "backward_edit": "dropped the pragmas",
           "features_before": ["unroll", "coarsening"], "features_after": ["coarsening"],
           "evidence_lines": lines if lines is not None else _pragma_lines(RICH), "kernel": kernel}
    obj.update(over)
    return "Here is the step.\n\n```json\n" + json.dumps(obj) + "\n```\n"


def forward(kernel: str) -> str:
    return f"```cuda\n{kernel}```\n"


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def _walk(server, replies, latency=None, budget=None):
    for text in replies:
        server.script.append(anthropic_reply(text))
    client = anthropic.Anthropic(api_key="test-key", base_url=server.url, max_retries=0)
    llm = LLMMaterializer(AnthropicBackend(client=client, sleep=FakeSleep()), budget_usd=budget)
    prop = make_proposer("llm", RS, llm=llm)
    gate = ScriptedGate(latency=latency or (lambda src: 200.0 if "// slow" in src else 100.0))
    lin = Walker(gate, load_workload(RS), [prop], Limits(max_steps=1)).run(RICH, origin="08_unroll.cu")
    return lin, prop, llm


BAD = "no json here"


def test_a_valid_proposal_becomes_a_step(server):
    lin, prop, llm = _walk(server, [answer(ONE_LESS), forward(RICH)])
    assert [t["mechanism"] for t in lin["transitions"]] == ["unroll"] and not lin["rejections"]
    assert lin["termination"] == "step_limit"
    # the second request carried the kernel with line numbers and the cached prefix
    body = server.requests[0]["body"]
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"} and "   1| " in body["messages"][0]["content"]
    assert "Re-apply the optimization \"unroll\"" in server.requests[1]["body"]["messages"][0]["content"]
    assert llm.spent_usd > 0 and [e["verdict"] for e in prop.log] == ["proposed", "rederive"]


def test_two_mechanisms_removed_is_rejected_by_the_audit(server):
    lin, _, _ = _walk(server, [answer(TWO_LESS), BAD, BAD])
    assert not lin["transitions"]
    assert [r["kind"] for r in lin["rejections"]][0] == "audit"


def test_citing_lines_that_do_not_exist_is_rejected(server):
    lin, _, _ = _walk(server, [answer(ONE_LESS, lines=[[900, 910]]), BAD, BAD])
    rej = lin["rejections"][0]
    assert rej["kind"] == "not_applicable" and "llm_citation" in rej["message"] and "do not exist" in rej["message"]
    # the next request told the model why
    assert "citation check" in server.requests[1]["body"]["messages"][0]["content"]


def test_a_too_slow_forward_rederivation_is_rejected(server):
    lin, _, _ = _walk(server, [answer(ONE_LESS), forward(RICH + "\n// slow\n"), BAD, BAD])
    assert not lin["transitions"] and lin["rejections"][0]["kind"] == "rederive_slow"


def test_malformed_json_is_a_recorded_rejection(server):
    broken = "```json\n{\"mechanism\": \"unroll\", \n```"
    extra = answer(ONE_LESS, surprise=1)
    lin, prop, _ = _walk(server, [broken, extra, BAD])
    reasons = [r["message"] for r in lin["rejections"]]
    assert len(reasons) == 3 and all(r.startswith("llm_parse") for r in reasons)
    assert "does not parse" in reasons[0] and "unexpected ['surprise']" in reasons[1] and "found 0" in reasons[2]
    assert lin["termination"] == "no_proposal"


def test_the_budget_stops_the_walk(server):
    lin, _, llm = _walk(server, [answer(ONE_LESS), forward(RICH)], budget=0.0001)
    assert lin["termination"] == "budget" and "budget" in lin["budget"] and not server.requests


def test_a_done_answer_ends_the_asking_on_that_kernel(server):
    done = '```json\n{"done": true, "reason": "nothing left"}\n```'
    lin, prop, _ = _walk(server, [done, answer(ONE_LESS), forward(RICH)])
    assert not lin["transitions"] and not lin["rejections"] and lin["termination"] == "no_proposal"
    assert len(server.requests) == 1 and [e["verdict"] for e in prop.log] == ["done"]
    assert "done" in server.requests[0]["body"]["system"][0]["text"]  # the prompt says how to answer it


def test_declared_features_must_be_one_removal():
    with pytest.raises(LLMProposalError, match="does not list the mechanism"):
        parse_proposal(answer(ONE_LESS, features_before=["coarsening"]))
    with pytest.raises(LLMProposalError, match=r"added \['vector_access'\]"):
        parse_proposal(answer(ONE_LESS, features_after=["coarsening", "vector_access"]))
    with pytest.raises(LLMProposalError, match=r"also removed \['coarsening'\]"):
        parse_proposal(answer(ONE_LESS, features_after=[]))
    with pytest.raises(LLMProposalError, match="done answer"):
        parse_proposal('```json\n{"done": true, "reason": "x", "kernel": ""}\n```')
    assert parse_proposal(answer(ONE_LESS, features_after=["coarsening", "unroll"]))["mechanism"] == "unroll"
    assert parse_proposal('```json\n{"done": true, "reason": "x"}\n```') == {"done": True, "reason": "x"}


def test_parse_and_citation_checks():
    with pytest.raises(LLMProposalError):
        parse_proposal(answer(ONE_LESS) + answer(ONE_LESS))  # two blocks
    with pytest.raises(LLMProposalError, match="snake_case"):
        parse_proposal(answer(ONE_LESS, mechanism="Unroll Loops"))
    with pytest.raises(LLMProposalError, match="extern"):
        parse_proposal(answer("__global__ void k() {}"))
    assert check_citations(RICH, ONE_LESS, _pragma_lines(RICH)) is None
    assert "none of the cited lines" in check_citations(RICH, ONE_LESS, [[4, 5]])  # the #includes
    assert numbered("a\nb").splitlines() == ["   1| a", "   2| b"]


def test_the_llm_proposer_needs_a_client():
    with pytest.raises(ProposerError, match="ANTHROPIC_API_KEY"):
        make_proposer("llm", RS)


def test_mine_with_the_llm_proposer_prompt_only_and_missing_key(tmp_path, monkeypatch):
    from click.testing import CliRunner
    from klineage.cli import main
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    r = CliRunner().invoke(main, ["mine", str(RS), "--proposer", "llm", "--prompt-only", "--json", "--db", str(tmp_path / "a.duckdb")])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert "Remove one more mechanism" in d["prompt"] and d["estimate"]["usd_max"] > 0
    assert not (tmp_path / "a.duckdb").exists()  # a dry run stores nothing
    r = CliRunner().invoke(main, ["mine", str(RS), "--proposer", "llm", "--db", str(tmp_path / "b.duckdb")])
    assert r.exit_code != 0 and "ANTHROPIC_API_KEY" in r.output and not (tmp_path / "b.duckdb").exists()
