"""Sending: the Anthropic SDK and an OpenAI-compatible HTTP server, behind one retry loop
(``RetryingBackend``): a backend only says how to make one attempt and which failures are transient.
Nothing here stores or returns the API key."""
from __future__ import annotations

import os
import time
from typing import Callable, Mapping

from klineage.llm.errors import LLMError, MissingKeyError
from klineage.llm.pricing import DEFAULT_MODEL, Usage
from klineage.llm.requests import DEFAULT_MAX_TOKENS, build_anthropic_request, build_openai_request

try:  # the anthropic SDK in some environments ships its fork as `httpx2` (same API)
    import httpx
except ImportError:  # pragma: no cover - depends on the environment
    import httpx2 as httpx  # type: ignore[no-redef]

RETRY_STATUS = frozenset({429, 503, 529})
_MAX_RETRY_AFTER_S = 60.0


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


class RetryingBackend:
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


class AnthropicBackend(RetryingBackend):
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


class OpenAICompatBackend(RetryingBackend):
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




def make_backend(model: str | None = None, base_url: str | None = None, env: Mapping[str, str] = os.environ):
    """The client for `model`: an OpenAI-compatible server at `base_url` when given, else the Anthropic
    API. Keys come from `env` only; a missing Anthropic key raises MissingKeyError (naming the variable)."""
    if base_url:
        return OpenAICompatBackend(base_url, model or DEFAULT_MODEL, env=env)
    return AnthropicBackend(model or DEFAULT_MODEL, env=env)
