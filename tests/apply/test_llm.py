"""The llm materializer against a scripted local HTTP server: both backends, the real SDK, no network."""

from __future__ import annotations

import json
from dataclasses import asdict

import anthropic
import pytest

from klineage import llm
from klineage.apply.llm import LLMMaterializer, build_prompt
from klineage.llm import (PRICES, AnthropicBackend, BudgetExhausted, LLMError, MissingKeyError, OpenAICompatBackend,
                          ParseError, Usage, build_anthropic_request, estimate_cost, parse_kernel, prompt_hash)
from tests.support.scripted_server import ScriptedServer as Server, anthropic_reply, error_reply, openai_reply

httpx = llm.httpx  # httpx, or the SDK's httpx2 fork where that is what is installed

KEY = "test-key"
CARDS = ["# Skill: vectorized loads\n\nLoad four floats at a time with `float4` when the row is 16-byte aligned.\n"]
KERNEL = ('#include <cuda_runtime.h>\n__global__ void k(const float* x, float* y, int n) {\n'
          '  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i];\n}\n'
          'extern "C" void run(const float* x, float* y, int n, cudaStream_t s) {\n'
          '  k<<<(n + 255) / 256, 256, 0, s>>>(x, y, n);\n}\n')
CONTRACT = 'extern "C" void run(const float* x, float* y, int n, cudaStream_t s);\n\n# workload.py\nN = 1 << 20\n'
NEW_KERNEL = KERNEL.replace("256, 0, s", "128, 0, s")
GOOD = f"Applied the card.\n\n```cuda\n{NEW_KERNEL}```\n"
NO_KERNEL = "I cannot do that without more information."
FEEDBACK = "COMPILE_ERROR: kernel.cu(3): error: identifier \"float5\" is undefined"


# ---------------------------------------------------------------- scripted server

@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


class FakeSleep:
    def __init__(self):
        self.calls: list[float] = []

    def __call__(self, seconds):
        self.calls.append(seconds)


def make_backend(kind, server, sleep=None, model=None):
    sleep = sleep or FakeSleep()
    if kind == "anthropic":
        client = anthropic.Anthropic(api_key=KEY, base_url=server.url, max_retries=0)
        return AnthropicBackend(model=model or "claude-sonnet-4-5", client=client, sleep=sleep)
    return OpenAICompatBackend(base_url=server.url + "/v1", model=model or "claude-haiku-4-5",
                               http=httpx.Client(), sleep=sleep, env={"OPENAI_API_KEY": KEY})


def reply(kind, text, input_tokens=1000, output_tokens=500, cache_read=0, cache_write=0):
    if kind == "anthropic":
        return anthropic_reply(text, input_tokens, output_tokens, cache_write, cache_read)
    return openai_reply(text, input_tokens + cache_read, output_tokens, cache_read)


def user_text(kind, recorded):
    messages = recorded["body"]["messages"]
    return messages[-1]["content"]


def cost(model, inp=0, out=0, write=0, read=0):
    p = PRICES[model]
    return (inp * p[0] + out * p[1] + write * p[2] + read * p[3]) / 1e6


BOTH = pytest.mark.parametrize("kind", ["anthropic", "openai"])


# ---------------------------------------------------------------- both backends

@BOTH
def test_good_answer_gives_kernel_and_cost(kind, server):
    server.script.append(reply(kind, GOOD, input_tokens=1200, output_tokens=700))
    backend = make_backend(kind, server)
    ex = LLMMaterializer(backend).propose(CARDS, KERNEL, CONTRACT, None)
    assert ex.kernel == NEW_KERNEL
    assert ex.error is None and ex.attempts == 1 and ex.backend == kind
    assert ex.usage.input_tokens == 1200 and ex.usage.output_tokens == 700
    assert ex.cost_usd == pytest.approx(cost(backend.model, inp=1200, out=700), rel=1e-12)
    assert len(server.requests) == 1
    path = server.requests[0]["path"]
    assert path == ("/v1/messages" if kind == "anthropic" else "/v1/chat/completions")
    sent = server.requests[0]["body"]
    system = sent["system"][0]["text"] if kind == "anthropic" else sent["messages"][0]["content"]
    assert CARDS[0].strip() in system
    assert KERNEL.strip() in user_text(kind, server.requests[0])


@BOTH
def test_answer_without_kernel_is_an_error_not_a_raise(kind, server):
    server.script.append(reply(kind, NO_KERNEL))
    mat = LLMMaterializer(make_backend(kind, server))
    ex = mat.propose(CARDS, KERNEL, CONTRACT, None)
    assert ex.kernel is None
    assert "no fenced code block" in ex.error
    assert ex.cost_usd > 0 and mat.spent_usd == pytest.approx(ex.cost_usd)
    assert mat.exchanges == [ex]


@BOTH
def test_gate_feedback_reaches_the_second_request(kind, server):
    server.script += [reply(kind, GOOD), reply(kind, GOOD)]
    mat = LLMMaterializer(make_backend(kind, server))
    first = mat.propose(CARDS, KERNEL, CONTRACT, None)
    # the gate rejected `first.kernel` (compile error): the loop asks again with the feedback
    second = mat.propose(CARDS, first.kernel, CONTRACT, FEEDBACK)
    assert second.kernel == NEW_KERNEL
    assert len(server.requests) == 2
    assert FEEDBACK not in user_text(kind, server.requests[0])
    text = user_text(kind, server.requests[1])
    assert "The last attempt was rejected by the gate:" in text and FEEDBACK in text
    assert first.prompt_hash != second.prompt_hash


@BOTH
def test_429_then_success_retries_once(kind, server):
    server.script += [error_reply(429, "rate_limit_error"), reply(kind, GOOD)]
    sleep = FakeSleep()
    ex = LLMMaterializer(make_backend(kind, server, sleep=sleep)).propose(CARDS, KERNEL, CONTRACT, None)
    assert ex.attempts == 2 and ex.kernel == NEW_KERNEL
    assert sleep.calls == [1.0]
    assert len(server.requests) == 2


@BOTH
def test_overloaded_529_and_retry_after_header(kind, server):
    server.script += [error_reply(529, "overloaded_error", {"retry-after": "3"}),
                      error_reply(503, "overloaded_error"), reply(kind, GOOD)]
    sleep = FakeSleep()
    ex = LLMMaterializer(make_backend(kind, server, sleep=sleep)).propose(CARDS, KERNEL, CONTRACT, None)
    assert ex.attempts == 3
    assert sleep.calls == [3.0, 2.0]  # retry-after wins over the 1 s backoff; then 2 s


@BOTH
def test_retries_give_up_and_other_errors_are_not_retried(kind, server):
    backend = make_backend(kind, server)
    backend.max_retries = 2
    server.script += [error_reply(429, "rate_limit_error")] * 3
    with pytest.raises(LLMError, match="gave up after 3 attempts"):
        backend.send(backend.build_request("p", "v"))
    server.requests.clear()
    server.script += [error_reply(400, "invalid_request_error")]
    with pytest.raises(LLMError, match="400") as err:
        backend.send(backend.build_request("p", "v"))
    assert len(server.requests) == 1
    assert KEY not in str(err.value)


@BOTH
def test_budget_exhaustion_stops_before_sending(kind, server):
    backend = make_backend(kind, server)
    probe = LLMMaterializer(None, model=backend.model).dry_run(CARDS, KERNEL, CONTRACT, None)
    budget = probe["estimate"]["usd_max"] * 1.5
    server.script += [reply(kind, GOOD, input_tokens=1000, output_tokens=8000), reply(kind, GOOD)]
    mat = LLMMaterializer(backend, budget_usd=budget)
    mat.propose(CARDS, KERNEL, CONTRACT, None)
    assert mat.spent_usd == pytest.approx(cost(backend.model, inp=1000, out=8000))
    with pytest.raises(BudgetExhausted, match="budget"):
        mat.propose(CARDS, KERNEL, CONTRACT, FEEDBACK)
    assert len(server.requests) == 1
    assert len(mat.exchanges) == 1
    # spent >= budget also refuses
    mat.budget_usd = mat.spent_usd
    with pytest.raises(BudgetExhausted):
        mat.propose(CARDS, KERNEL, CONTRACT, None)
    assert len(server.requests) == 1


@BOTH
def test_cached_prefix_accounting(kind, server):
    backend = make_backend(kind, server)
    model = backend.model
    server.script += [reply(kind, GOOD, input_tokens=300, output_tokens=500, cache_write=2000),
                      reply(kind, GOOD, input_tokens=300, output_tokens=500, cache_read=2000)]
    mat = LLMMaterializer(backend)
    first = mat.propose(CARDS, KERNEL, CONTRACT, None)
    second = mat.propose(CARDS, NEW_KERNEL, CONTRACT, FEEDBACK)
    b1, b2 = (r["body"] for r in server.requests)
    if kind == "anthropic":
        assert b1["system"] == [{"type": "text", "text": b1["system"][0]["text"],
                                 "cache_control": {"type": "ephemeral"}}]
        assert b1["system"] == b2["system"]  # identical prefix
        assert first.usage.cache_creation_input_tokens == 2000
        assert first.cost_usd == pytest.approx((300 * 3 + 500 * 15 + 2000 * 3.75) / 1e6, rel=1e-12)
        # sonnet: 300 x $3 + 500 x $15 + 2000 cached x $0.30 per million
        assert second.cost_usd == pytest.approx((300 * 3 + 500 * 15 + 2000 * 0.30) / 1e6, rel=1e-12)
        assert second.cost_usd == pytest.approx(0.009, rel=1e-12)
    else:
        assert b1["messages"][0] == b2["messages"][0]  # identical system prefix
        assert first.usage.cache_read_input_tokens == 0
        # haiku: prompt_tokens 2300 of which 2000 cached -> 300 x $1 + 500 x $5 + 2000 x $0.10 per million
        assert second.usage.input_tokens == 300
        assert second.cost_usd == pytest.approx((300 * 1 + 500 * 5 + 2000 * 0.10) / 1e6, rel=1e-12)
        assert second.cost_usd == pytest.approx(0.003, rel=1e-12)
    assert second.usage.cache_read_input_tokens == 2000
    assert mat.spent_usd == pytest.approx(first.cost_usd + second.cost_usd)


@BOTH
def test_key_never_in_exchange(kind, server):
    server.script += [reply(kind, GOOD), reply(kind, NO_KERNEL)]
    backend = make_backend(kind, server)
    mat = LLMMaterializer(backend)
    for fb in (None, FEEDBACK):
        ex = mat.propose(CARDS, KERNEL, CONTRACT, fb)
        assert KEY not in repr(ex)
        assert KEY not in json.dumps(asdict(ex))
    assert KEY not in repr(backend) and KEY not in repr(mat.__dict__.get("exchanges"))
    # but the key did reach the server, in the right header
    headers = {k.lower(): v for k, v in server.requests[0]["headers"].items()}
    # (the SDK sends x-api-key or, in newer releases, a bearer token)
    assert headers.get("x-api-key") == KEY or headers.get("authorization") == f"Bearer {KEY}"


# ---------------------------------------------------------------- keys, dry run, unknown model

def test_missing_anthropic_key_raises_at_construction():
    with pytest.raises(MissingKeyError, match="ANTHROPIC_API_KEY"):
        AnthropicBackend(env={})
    with pytest.raises(MissingKeyError, match="ANTHROPIC_API_KEY"):
        AnthropicBackend(env={"ANTHROPIC_API_KEY": "  "})


def test_anthropic_backend_builds_its_own_client_from_env(server):
    server.script.append(anthropic_reply(GOOD))
    backend = AnthropicBackend(env={"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": server.url},
                               sleep=FakeSleep())
    text, usage, attempts = backend.send(build_anthropic_request("p", "v"))
    assert text == GOOD and attempts == 1 and usage.input_tokens == 1000
    assert KEY not in repr(backend)


def test_openai_without_key_sends_no_authorization(server):
    server.script.append(openai_reply(GOOD))
    backend = OpenAICompatBackend(base_url=server.url + "/v1", model="local-model",
                                  http=httpx.Client(), env={})
    ex = LLMMaterializer(backend).propose(CARDS, KERNEL, CONTRACT, None)
    assert ex.kernel == NEW_KERNEL
    assert "authorization" not in {k.lower() for k in server.requests[0]["headers"]}
    # unknown model: cost None with a warning, never a crash
    assert ex.cost_usd is None and "local-model" in ex.warning


def test_unknown_model_with_budget_refuses():
    mat = LLMMaterializer(None, budget_usd=1.0, model="mystery-model")
    est = mat.dry_run(CARDS, KERNEL, CONTRACT, None)["estimate"]
    assert est["usd_max"] is None and "mystery-model" in est["warning"]
    assert Usage(10, 10).cost_usd("mystery-model") is None
    assert Usage(1_000_000, 0).cost_usd("claude-sonnet-4-5-20250929") == pytest.approx(3.0)


def test_dry_run_sends_nothing_and_shows_the_exact_prompt(server):
    backend = make_backend("anthropic", server)
    out = LLMMaterializer(backend).dry_run(CARDS, KERNEL, CONTRACT, FEEDBACK)
    prefix, variable = build_prompt(CARDS, KERNEL, CONTRACT, FEEDBACK)
    assert out["prompt"] == prefix + "\n\n" + variable
    assert out["request"]["system"][0]["text"] == prefix == out["system"]
    assert out["request"]["messages"] == [{"role": "user", "content": variable}]
    assert out["estimate"] == estimate_cost(out["request"], "claude-sonnet-4-5")
    assert out["estimate"]["input_tokens"] == (len(prefix) + len(variable) + 3) // 4
    assert out["estimate"]["max_output_tokens"] == 8000
    assert out["estimate"]["usd_max"] > 0
    assert server.requests == []
    # no backend, no key: still fine
    out2 = LLMMaterializer(None).dry_run(CARDS, KERNEL, CONTRACT, FEEDBACK)
    assert out2["prompt"] == out["prompt"]
    assert KEY not in json.dumps(out)


# ---------------------------------------------------------------- pure functions

def test_prompt_layout():
    prefix, variable = build_prompt(CARDS + ["# Second card {{ not_a_variable }}"], KERNEL, CONTRACT, None)
    assert CARDS[0].strip() in prefix and "{{ not_a_variable }}" in prefix  # verbatim, not templated
    assert "sm_90" in prefix and 'extern "C"' in prefix and "```cuda" in prefix
    assert KERNEL.strip() not in prefix and CONTRACT.strip() not in prefix
    assert KERNEL.strip() in variable and CONTRACT.strip() in variable
    assert "rejected by the gate" not in variable
    assert build_prompt(CARDS, "other", CONTRACT, FEEDBACK)[0] == build_prompt(CARDS, KERNEL, CONTRACT, None)[0]
    with pytest.raises(LLMError):
        build_prompt([], KERNEL, CONTRACT, None)


def test_prompt_hash_is_canonical():
    a = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}
    b = {"messages": [{"content": "x", "role": "user"}], "max_tokens": 1, "model": "m"}
    assert prompt_hash(a) == prompt_hash(b) and len(prompt_hash(a)) == 64
    assert prompt_hash(a) != prompt_hash({**a, "max_tokens": 2})


@pytest.mark.parametrize("tag", ["cuda", "cpp", "c++", "CUDA"])
def test_parse_kernel_accepts_one_tagged_block(tag):
    assert parse_kernel(f"text\n```{tag}\n{KERNEL}```\ntrailing") == KERNEL


@pytest.mark.parametrize("text, why", [
    (NO_KERNEL, "no fenced code block"),
    (f"```cuda\n{KERNEL}```\n\n```cuda\n{KERNEL}```", "2 fenced blocks"),
    (f"```cuda\n{KERNEL}```\nand the header:\n```\n#pragma once\n```", "2 fenced blocks"),
    ("```cuda\n__global__ void k() {}\n```", 'no extern "C"'),
    (f"```python\n{KERNEL}```", "tagged 'python'"),
    (f"```\n{KERNEL}```", "tagged 'nothing'"),
    (f"```cuda\n{KERNEL}", "unterminated"),
])
def test_parse_kernel_is_strict(text, why):
    with pytest.raises(ParseError, match=why):
        parse_kernel(text)
