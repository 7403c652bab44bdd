"""A budgeted session with one model: `ask` sends a prompt (prefix cached) and keeps the Exchange;
`preview` shows what it would send, with a cost estimate, needing no key."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from klineage.llm.backends import RetryingBackend, make_backend
from klineage.llm.errors import BudgetExhausted, LLMError, ParseError
from klineage.llm.parsing import parse_kernel
from klineage.llm.pricing import DEFAULT_MODEL, Usage, no_price_warning
from klineage.llm.requests import DEFAULT_MAX_TOKENS, build_anthropic_request, estimate_cost, prompt_hash


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


class LLMSession:
    """Budgeted calls to one model: each call's Exchange is kept; the budget is checked before sending."""

    def __init__(self, backend: RetryingBackend | None, budget_usd: float | None = None,
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
                            error=error, warning=None if cost is not None else no_price_warning(self.model))
        self.exchanges.append(exchange)
        return exchange

    def preview(self, prefix: str, variable: str) -> dict:
        """What `ask` would send for this prompt, with a cost estimate; sends nothing, needs no key."""
        request = self._request(prefix, variable)
        return {"prompt": f"{prefix}\n\n{variable}", "system": prefix, "user": variable,
                "request": request, "estimate": estimate_cost(request, self.model)}


def open_session(model: str | None = None, base_url: str | None = None, budget_usd: float | None = None,
                 dry_run: bool = False, kind: type[LLMSession] = LLMSession,
                 env: Mapping[str, str] = os.environ) -> LLMSession:
    """A session of `kind` with the client for `model` (klineage.llm.backends.make_backend); a dry run has
    no client and needs no key. A missing key raises MissingKeyError here, before anything is stored."""
    backend = None if dry_run else make_backend(model, base_url, env)
    return kind(backend, budget_usd=budget_usd, model=model)
