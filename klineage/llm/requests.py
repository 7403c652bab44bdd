"""Requests, built apart from sending them: the Anthropic Messages body, the OpenAI chat body, their
hash and a cost estimate. Pure functions: a dry run shows the exact request with no key and no network."""
from __future__ import annotations

import hashlib
import json
from typing import Any

from klineage.llm.pricing import DEFAULT_MODEL, no_price_warning, price_for

DEFAULT_MAX_TOKENS = 8000


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


def prompt_parts(request: dict) -> tuple[str, str]:
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
    system, user = prompt_parts(request)
    input_tokens = (len(system) + len(user) + 3) // 4
    max_output = int(request.get("max_tokens", DEFAULT_MAX_TOKENS))
    price = price_for(model)
    out: dict[str, Any] = {"input_tokens": input_tokens, "max_output_tokens": max_output}
    if price is None:
        out["usd_max"] = None
        out["warning"] = no_price_warning(model)
    else:
        p_in, p_out, p_write, _ = price
        out["usd_max"] = (input_tokens * max(p_in, p_write) + max_output * p_out) / 1e6
    return out
