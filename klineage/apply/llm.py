"""The `llm` backend of the apply stage: ask a model to rewrite a kernel so that it applies one skill.

The materializing prompt is built here (``build_prompt``, from prompts/materialize.j2); clients,
pricing, retries and answer parsing are the llm room's (klineage.llm). The prompt's stable prefix
(instructions + library cards, verbatim) is marked cacheable; the variable part carries the current
kernel, the workload contract and the gate's last feedback.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from klineage.llm import Exchange, LLMError, LLMSession
from klineage.templates import template_module


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


class LLMMaterializer(LLMSession):
    """Proposes one rewritten kernel per call, within a spending budget."""

    name = "llm"

    def propose(self, cards_md: list[str], kernel: str, contract: str, feedback: str | None) -> Exchange:
        prefix, variable = build_prompt(cards_md, kernel, contract, feedback)
        return self.ask(prefix, variable)

    def dry_run(self, cards_md: list[str], kernel: str, contract: str, feedback: str | None) -> dict:
        """The exact materializing prompt, the request and a cost estimate; sends nothing, needs no key."""
        return self.preview(*build_prompt(cards_md, kernel, contract, feedback))
