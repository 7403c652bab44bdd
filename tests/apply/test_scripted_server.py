"""The scripted model server (tests/support/scripted_server.py) through the real SDKs: replies picked
by what the prompt holds, a default, an exhausted script, scripted errors, the usage it reports (a
cache write, then reads) for both APIs, and script files checked when loaded."""
from __future__ import annotations

import json

import anthropic
import pytest

from klineage.apply.llm import LLMMaterializer
from klineage.llm import AnthropicBackend, LLMError, OpenAICompatBackend
from tests.support.scripted_server import ScriptedServer, load_script, tokens

from tests.apply.test_llm import FakeSleep, httpx

K1 = 'extern "C" void one() {}\n'
K2 = 'extern "C" void two() {}\n'


def _llm(server, api="anthropic"):
    if api == "anthropic":
        client = anthropic.Anthropic(api_key="k", base_url=server.url, max_retries=0)
        return LLMMaterializer(AnthropicBackend(client=client, sleep=FakeSleep()))
    return LLMMaterializer(OpenAICompatBackend(base_url=server.url + "/v1", model="claude-sonnet-4-5",
                                               http=httpx.Client(), sleep=FakeSleep(), env={}))


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_replies_are_picked_by_the_prompt_and_used_once(api):
    replies = [{"when": ["kernel two"], "text": f"```cuda\n{K2}```"},
               {"when": ["kernel one"], "text": f"```cuda\n{K1}```"},
               {"text": "no code"}]
    with ScriptedServer(replies, default={"text": "default answer"}) as server:
        llm = _llm(server, api)
        assert llm.ask("system", "please: kernel one").kernel == K1
        assert llm.ask("system", "please: kernel two").kernel == K2
        # "kernel one" is used up: the first unused reply without `when` comes next, then the default
        assert llm.ask("system", "please: kernel one").text == "no code"
        assert llm.ask("system", "kernel one again").text == "default answer"
        assert [r["reply"] for r in server.requests] == [1, 0, 2, "default"]
        assert server.unused() == [] and {r["api"] for r in server.requests} == {api}


def test_an_exhausted_script_and_scripted_errors():
    with ScriptedServer([{"status": 400, "error": "invalid_request_error"}]) as server:
        llm = _llm(server)
        with pytest.raises(LLMError, match="HTTP 400"):
            llm.ask("s", "u")
        with pytest.raises(LLMError, match="script exhausted"):
            llm.ask("s", "u")
    with ScriptedServer([{"status": 429, "error": "rate_limit_error"}, {"text": "```cuda\n" + K1 + "```"}]) as server:
        ex = _llm(server).ask("s", "u")  # a 429 is retried by the backend
        assert ex.kernel == K1 and ex.attempts == 2


def test_usage_counts_the_prompt_and_the_cache():
    system, user, text = "S" * 4000, "U" * 400, "```cuda\n" + K1 + "```"
    with ScriptedServer([{"text": text}, {"text": text}]) as server:
        llm = _llm(server)
        first, second = llm.ask(system, user), llm.ask(system, user)
    assert first.usage.cache_creation_input_tokens == tokens(system) == 1000
    assert first.usage.cache_read_input_tokens == 0 and first.usage.input_tokens == tokens(user)
    assert second.usage.cache_read_input_tokens == 1000 and second.usage.cache_creation_input_tokens == 0
    assert first.usage.output_tokens == tokens(text)
    assert second.cost_usd < first.cost_usd and llm.spent_usd == pytest.approx(first.cost_usd + second.cost_usd)
    with ScriptedServer([{"text": text}, {"text": text}]) as server:
        llm = _llm(server, "openai")
        a, b = llm.ask(system, user), llm.ask(system, user)
    # OpenAI reports prompt tokens with the cached ones inside; the backend keeps the uncached apart
    assert a.usage.cache_read_input_tokens == 0 and a.usage.input_tokens == 1100
    assert b.usage.cache_read_input_tokens == 1000 and b.usage.input_tokens == 100


def test_script_files_are_checked(tmp_path):
    good = tmp_path / "s.json"
    good.write_text(json.dumps({"replies": [{"text": "a", "when": ["x"]}], "default": {"text": "d"}}))
    assert load_script(good) == ([{"text": "a", "when": ["x"]}], {"text": "d"})
    for bad in ({"reply": []}, {"replies": [{"when": ["x"]}]}, {"replies": [{"text": "a", "error": "e"}]},
                {"replies": [{"text": "a", "when": "x"}]}):
        good.write_text(json.dumps(bad))
        with pytest.raises(ValueError):
            load_script(good)
