"""The `llm` backend of the apply stage: ask a model to rewrite a kernel so that it applies one skill.

Building a request (``build_prompt`` -> ``build_*_request``) is kept apart from sending it (the
backends), so a dry run can show the exact prompt and a cost estimate without a key or a network.
The prompt's stable prefix (instructions + library cards, verbatim) is marked cacheable; the variable
part carries the current kernel, the workload contract and the gate's last feedback.

Both backends share one retry loop (``_RetryingBackend``): they only say how to make one attempt and
which failures are transient. Nothing here stores or returns the API key.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping

from klineage import errors as _errors  # the shared budget error the walk catches
from klineage.errors import KLineageError
from klineage.templates import template_module

try:  # the anthropic SDK in some environments ships its fork as `httpx2` (same API)
    import httpx
except ImportError:  # pragma: no cover - depends on the environment
    import httpx2 as httpx  # type: ignore[no-redef]



class LLMError(KLineageError):
    """The llm materializer could not get a usable answer."""


class MissingKeyError(LLMError):
    """No API key in the environment."""


class ParseError(LLMError):
    """The model's answer held no parseable kernel."""


class BudgetExhausted(LLMError, _errors.BudgetExhausted):
    """Sending another request could exceed the spending budget."""


# USD per million tokens: input, output, cache_write, cache_read.
PRICES: dict[str, tuple[float, float, float, float]] = {
    "claude-sonnet-4-5": (3.0, 15.0, 3.75, 0.30),
    "claude-opus-4-1": (15.0, 75.0, 18.75, 1.50),
    "claude-haiku-4-5": (1.0, 5.0, 1.25, 0.10),
}
DEFAULT_MODEL = "claude-sonnet-4-5"
DEFAULT_MAX_TOKENS = 8000
RETRY_STATUS = frozenset({429, 503, 529})
_MAX_RETRY_AFTER_S = 60.0


def price_for(model: str | None) -> tuple[float, float, float, float] | None:
    """Prices of `model`, also for dated ids ("claude-sonnet-4-5-20250929"); None when unknown."""
    if not model:
        return None
    if model in PRICES:
        return PRICES[model]
    stems = [k for k in PRICES if model.startswith(k + "-")]
    return PRICES[max(stems, key=len)] if stems else None


def _no_price_warning(model: str | None) -> str:
    return f"no price known for model {model!r}: cost not counted (add it to klineage.apply.llm.PRICES)"


@dataclass
class Usage:
    input_tokens: int = 0  # uncached input only (the Anthropic convention)
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def cost_usd(self, model: str | None) -> float | None:
        price = price_for(model)
        if price is None:
            return None
        p_in, p_out, p_write, p_read = price
        return (self.input_tokens * p_in + self.output_tokens * p_out
                + self.cache_creation_input_tokens * p_write
                + self.cache_read_input_tokens * p_read) / 1e6


@dataclass
class Exchange:
    """One call, as the loop stores it (never the API key)."""
    backend: str
    model: str
    prompt_hash: str
    usage: Usage
    cost_usd: float | None
    attempts: int
    text: str
    kernel: str | None
    error: str | None
    warning: str | None = None


# ---------------------------------------------------------------- requests (pure functions)

@lru_cache(maxsize=1)
def _template_module():
    return template_module(Path(__file__).parent / "prompts", "materialize.j2", trim=True)


def build_prompt(cards_md: list[str], kernel: str, contract: str, feedback: str | None) -> tuple[str, str]:
    """(stable_prefix, variable_part): the prefix holds instructions + the cards verbatim (cacheable);
    the variable part the current kernel, the contract and the last gate feedback."""
    if not cards_md:
        raise LLMError("no skill card given: the llm materializer applies exactly one skill")
    mod = _template_module()
    prefix = str(mod.prefix(cards=[c.strip("\n") for c in cards_md]))
    variable = str(mod.variable(kernel=kernel.strip("\n"), contract=contract.strip("\n"),
                                feedback=(feedback or "").strip("\n") or None))
    return prefix, variable


def build_anthropic_request(prefix: str, variable: str, model: str = DEFAULT_MODEL,
                            max_tokens: int = DEFAULT_MAX_TOKENS) -> dict:
    """kwargs for ``client.messages.create``; the system block (the prefix) is cacheable."""
    return {
        "model": model,
        "max_tokens": max_tokens,
        "system": [{"type": "text", "text": prefix, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": variable}],
    }


def build_openai_request(prefix: str, variable: str, model: str,
                         max_tokens: int = DEFAULT_MAX_TOKENS) -> dict:
    """Body for ``POST {base}/chat/completions`` (servers cache a repeated leading prefix themselves)."""
    return {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [{"role": "system", "content": prefix}, {"role": "user", "content": variable}],
    }


def _prompt_parts(request: dict) -> tuple[str, str]:
    """(system text, user text) of a request of either shape."""
    system = request.get("system", "")
    if isinstance(system, list):
        system = "".join(block.get("text", "") for block in system)
    user_parts = []
    for message in request.get("messages", []):
        content = message.get("content", "")
        if isinstance(content, list):
            content = "".join(block.get("text", "") for block in content)
        if message.get("role") == "system":
            system += content
        else:
            user_parts.append(content)
    return system, "\n\n".join(user_parts)


def prompt_hash(request: dict) -> str:
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def estimate_cost(request: dict, model: str | None) -> dict:
    """Rough upper bound: prompt tokens ~ chars/4, all of it priced as a cache write (the dearest
    input price), plus max_tokens of output."""
    system, user = _prompt_parts(request)
    input_tokens = (len(system) + len(user) + 3) // 4
    max_output = int(request.get("max_tokens", DEFAULT_MAX_TOKENS))
    price = price_for(model)
    out: dict[str, Any] = {"input_tokens": input_tokens, "max_output_tokens": max_output}
    if price is None:
        out["usd_max"] = None
        out["warning"] = _no_price_warning(model)
    else:
        p_in, p_out, p_write, _ = price
        out["usd_max"] = (input_tokens * max(p_in, p_write) + max_output * p_out) / 1e6
    return out


_FENCE_OPEN = re.compile(r"^\s*```\s*([A-Za-z0-9_+#.-]*)\s*$")
_FENCE_CLOSE = re.compile(r"^\s*```\s*$")
_KERNEL_LANGS = {"cuda", "cpp", "c++"}


def parse_kernel(text: str) -> str:
    """The kernel in the answer. Strict: exactly one fenced block, tagged cuda / cpp / c++,
    containing ``extern "C"``; anything else is a ParseError that says what was wrong."""
    blocks: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    lang = ""
    for line in text.splitlines():
        if current is None:
            m = _FENCE_OPEN.match(line)
            if m:
                lang, current = m.group(1).lower(), []
        elif _FENCE_CLOSE.match(line):
            blocks.append((lang, current))
            current = None
        else:
            current.append(line)
    if current is not None:
        raise ParseError("the answer has an unterminated ``` fence (was the output cut off at max_tokens?)")
    if not blocks:
        raise ParseError("the answer has no fenced code block; expected exactly one ```cuda block")
    if len(blocks) > 1:
        tags = ", ".join(repr(b[0] or "untagged") for b in blocks)
        raise ParseError(f"the answer has {len(blocks)} fenced blocks ({tags}); expected exactly one ```cuda block")
    lang, lines = blocks[0]
    if lang not in _KERNEL_LANGS:
        raise ParseError(f"the fenced block is tagged {lang or 'nothing'!r}; expected ```cuda (or ```cpp / ```c++)")
    kernel = "\n".join(lines).strip("\n")
    if 'extern "C"' not in kernel:
        raise ParseError('the fenced block has no extern "C" entry point')
    return kernel + "\n"


# ---------------------------------------------------------------- sending

class _Transient(Exception):
    """A failure worth retrying (rate limit, overload, connection)."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    try:
        value = float((headers or {}).get("retry-after", ""))
    except (TypeError, ValueError):
        return None
    return min(max(value, 0.0), _MAX_RETRY_AFTER_S)


class _RetryingBackend:
    """Shared retry loop; subclasses implement ``_attempt`` (one try) and ``build_request``."""

    name = "base"
    model: str

    def __init__(self, max_retries: int, backoff_s: float, sleep: Callable[[float], None]):
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self._sleep = sleep
        self._secret: str | None = None

    def build_request(self, prefix: str, variable: str, max_tokens: int = DEFAULT_MAX_TOKENS) -> dict:
        raise NotImplementedError

    def _attempt(self, request: dict) -> tuple[str, Usage]:
        raise NotImplementedError

    def _scrub(self, message: str) -> str:
        return message.replace(self._secret, "***") if self._secret else message

    def send(self, request: dict) -> tuple[str, Usage, int]:
        """(text, usage, attempts); retries transient failures with exponential backoff."""
        attempts = 0
        while True:
            attempts += 1
            try:
                text, usage = self._attempt(request)
                return text, usage, attempts
            except _Transient as exc:
                if attempts > self.max_retries:
                    raise LLMError(f"{self.name}: gave up after {attempts} attempts: "
                                   f"{self._scrub(str(exc))}") from None
                delay = self.backoff_s * 2 ** (attempts - 1)
                if exc.retry_after is not None:
                    delay = max(delay, exc.retry_after)
                self._sleep(delay)

    def __repr__(self) -> str:  # never shows the key
        return f"{type(self).__name__}(model={self.model!r})"


class AnthropicBackend(_RetryingBackend):
    name = "anthropic"

    def __init__(self, model: str = DEFAULT_MODEL, client=None, max_retries: int = 4,
                 backoff_s: float = 1.0, sleep: Callable[[float], None] = time.sleep,
                 env: Mapping[str, str] = os.environ):
        super().__init__(max_retries, backoff_s, sleep)
        self.model = model
        if client is None:
            key = env.get("ANTHROPIC_API_KEY") or ""
            if not key.strip():
                raise MissingKeyError("set ANTHROPIC_API_KEY (or use a deterministic backend: apply --materializer rules|sweep, "
                                      "mine --proposer rules|versions)")
            import anthropic
            self._secret = key
            # SDK retries off: ours are counted. base_url None lets the SDK read ANTHROPIC_BASE_URL.
            client = anthropic.Anthropic(api_key=key, base_url=env.get("ANTHROPIC_BASE_URL") or None,
                                         max_retries=0)
        self._client = client

    def build_request(self, prefix: str, variable: str, max_tokens: int = DEFAULT_MAX_TOKENS) -> dict:
        return build_anthropic_request(prefix, variable, self.model, max_tokens)

    def _attempt(self, request: dict) -> tuple[str, Usage]:
        import anthropic
        try:
            message = self._client.messages.create(**request)
        except anthropic.APIConnectionError as exc:  # includes timeouts
            raise _Transient(f"connection error: {exc}") from None
        except anthropic.APIStatusError as exc:
            detail = f"HTTP {exc.status_code}: {exc.message}"
            if exc.status_code in RETRY_STATUS:
                raise _Transient(detail, _retry_after(exc.response.headers)) from None
            raise LLMError(f"anthropic: {self._scrub(detail)}") from None
        except anthropic.AnthropicError as exc:
            raise LLMError(f"anthropic: {self._scrub(str(exc))}") from None
        text = "".join(getattr(block, "text", "") for block in message.content
                       if getattr(block, "type", None) == "text")
        u = message.usage
        usage = Usage(input_tokens=u.input_tokens or 0, output_tokens=u.output_tokens or 0,
                      cache_creation_input_tokens=getattr(u, "cache_creation_input_tokens", None) or 0,
                      cache_read_input_tokens=getattr(u, "cache_read_input_tokens", None) or 0)
        return text, usage


class OpenAICompatBackend(_RetryingBackend):
    name = "openai"

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", http=None,
                 max_retries: int = 4, backoff_s: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep, env: Mapping[str, str] = os.environ):
        super().__init__(max_retries, backoff_s, sleep)
        self.model = model
        self._url = base_url.rstrip("/") + "/chat/completions"
        key = (env.get(api_key_env) or "").strip()
        self._secret = key or None
        # a local server needs no key: then no Authorization header at all
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = http if http is not None else httpx.Client(timeout=600.0)

    def build_request(self, prefix: str, variable: str, max_tokens: int = DEFAULT_MAX_TOKENS) -> dict:
        return build_openai_request(prefix, variable, self.model, max_tokens)

    def _attempt(self, request: dict) -> tuple[str, Usage]:
        try:
            response = self._http.post(self._url, json=request, headers=self._headers)
        except httpx.TransportError as exc:  # connect errors, timeouts, dropped connections
            raise _Transient(f"connection error: {type(exc).__name__}: {exc}") from None
        if response.status_code in RETRY_STATUS:
            raise _Transient(f"HTTP {response.status_code}: {response.text[:300]}",
                             _retry_after(response.headers))
        if response.status_code >= 400:
            raise LLMError(f"openai: HTTP {response.status_code}: {self._scrub(response.text[:500])}")
        try:
            body = response.json()
            text = body["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError):
            raise LLMError(f"openai: unexpected response: {self._scrub(response.text[:500])}") from None
        u = body.get("usage") or {}
        prompt = int(u.get("prompt_tokens") or 0)
        cached = int((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        # prompt_tokens includes the cached ones; keep input_tokens = uncached, as Anthropic reports it
        usage = Usage(input_tokens=max(prompt - cached, 0), output_tokens=int(u.get("completion_tokens") or 0),
                      cache_read_input_tokens=cached)
        return text, usage


# ---------------------------------------------------------------- the materializer

class LLMMaterializer:
    """Proposes one rewritten kernel per call, within a spending budget."""

    name = "llm"

    def __init__(self, backend: _RetryingBackend | None, budget_usd: float | None = None,
                 model: str | None = None, max_tokens: int = DEFAULT_MAX_TOKENS):
        self.backend = backend
        self.budget_usd = budget_usd
        self.model = model or getattr(backend, "model", None) or DEFAULT_MODEL
        if backend is not None:
            backend.model = self.model
        self.max_tokens = max_tokens
        self.spent_usd = 0.0
        self.exchanges: list[Exchange] = []

    def _request(self, prefix: str, variable: str) -> dict:
        if self.backend is None:  # a dry run without a backend shows the Anthropic request
            return build_anthropic_request(prefix, variable, self.model, self.max_tokens)
        return self.backend.build_request(prefix, variable, self.max_tokens)

    def _check_budget(self, estimate: dict) -> None:
        if self.budget_usd is None:
            return
        left = self.budget_usd - self.spent_usd
        if left <= 0:
            raise BudgetExhausted(f"budget ${self.budget_usd:.4f} spent (${self.spent_usd:.4f} used)")
        if estimate["usd_max"] is None:
            raise BudgetExhausted(f"cannot keep to a budget: {estimate['warning']}")
        if estimate["usd_max"] > left:
            raise BudgetExhausted(f"the next call may cost up to ${estimate['usd_max']:.4f} but only "
                                  f"${left:.4f} of the ${self.budget_usd:.4f} budget is left")

    def propose(self, cards_md: list[str], kernel: str, contract: str, feedback: str | None) -> Exchange:
        prefix, variable = build_prompt(cards_md, kernel, contract, feedback)
        return self.ask(prefix, variable)

    def ask(self, prefix: str, variable: str, parse=parse_kernel) -> Exchange:
        """One budgeted call with a given prompt (prefix cached): the Exchange, its kernel parsed by
        `parse` (None: not parsed here). Raises BudgetExhausted before sending when over budget."""
        if self.backend is None:
            raise LLMError("no backend configured: only dry_run is possible")
        request = self._request(prefix, variable)
        self._check_budget(estimate_cost(request, self.model))
        text, usage, attempts = self.backend.send(request)
        cost = usage.cost_usd(self.model)
        if cost is not None:
            self.spent_usd += cost
        kernel_out, error = None, None
        if parse is not None:
            try:
                kernel_out = parse(text)
            except ParseError as exc:
                error = str(exc)
        exchange = Exchange(backend=self.backend.name, model=self.model, prompt_hash=prompt_hash(request),
                            usage=usage, cost_usd=cost, attempts=attempts, text=text, kernel=kernel_out,
                            error=error, warning=None if cost is not None else _no_price_warning(self.model))
        self.exchanges.append(exchange)
        return exchange

    def dry_run(self, cards_md: list[str], kernel: str, contract: str, feedback: str | None) -> dict:
        """The exact materializing prompt, the request and a cost estimate; sends nothing, needs no key."""
        return self.preview(*build_prompt(cards_md, kernel, contract, feedback))

    def preview(self, prefix: str, variable: str) -> dict:
        """What `ask` would send for this prompt, with a cost estimate; sends nothing, needs no key."""
        request = self._request(prefix, variable)
        return {"prompt": f"{prefix}\n\n{variable}", "system": prefix, "user": variable,
                "request": request, "estimate": estimate_cost(request, self.model)}
