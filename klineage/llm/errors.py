"""Errors of the llm room: every failure to get a usable answer is an LLMError."""
from __future__ import annotations

from klineage import errors as _errors  # the shared budget error the walk catches
from klineage.errors import KLineageError


class LLMError(KLineageError):
    """The llm materializer could not get a usable answer."""


class MissingKeyError(LLMError):
    """No API key in the environment."""


class ParseError(LLMError):
    """The model's answer held no parseable kernel."""


class BudgetExhausted(LLMError, _errors.BudgetExhausted):
    """Sending another request could exceed the spending budget."""
