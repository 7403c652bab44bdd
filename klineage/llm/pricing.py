"""Model prices (USD per million tokens) and token usage; a cost is None for a model with no known price."""
from __future__ import annotations

from dataclasses import dataclass


# USD per million tokens: input, output, cache_write, cache_read.
PRICES: dict[str, tuple[float, float, float, float]] = {
    "claude-sonnet-4-5": (3.0, 15.0, 3.75, 0.30),
    "claude-opus-4-1": (15.0, 75.0, 18.75, 1.50),
    "claude-haiku-4-5": (1.0, 5.0, 1.25, 0.10),
}
DEFAULT_MODEL = "claude-sonnet-4-5"


def price_for(model: str | None) -> tuple[float, float, float, float] | None:
    """Prices of `model`, also for dated ids ("claude-sonnet-4-5-20250929"); None when unknown."""
    if not model:
        return None
    if model in PRICES:
        return PRICES[model]
    stems = [k for k in PRICES if model.startswith(k + "-")]
    return PRICES[max(stems, key=len)] if stems else None


def no_price_warning(model: str | None) -> str:
    return f"no price known for model {model!r}: cost not counted (add it to klineage.llm.PRICES)"


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
