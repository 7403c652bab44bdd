"""The `llm` proposer: a model proposes each backward step of an expert kernel that has no rules
rewrite and no version ladder, under the same gate and audit as every other proposer.

Prompt (templates/llm_backward.j2): the granularity rules and the known mechanisms (a cached prefix),
then the current kernel with line numbers, the detectors' features, the mechanisms already removed
and the last rejection's reason. The answer must be one ```json block with exactly the keys
mechanism, locus, backward_edit, features_before, features_after, evidence_lines, kernel; or, when
the model sees no mechanism left, exactly {"done": true, "reason": ...}, which ends the asking on this
kernel. Anything else is a recorded rejection (`llm_parse`), and the walk goes on with the next call.
The declared features must describe one removal: the mechanism among features_before, and nothing
in features_after that is not in features_before, nor anything else gone (`llm_parse` otherwise).

Checks before the gate: the cited line ranges must exist in the current kernel and at least one
cited line must be changed by the proposed edit (`llm_citation`); where the detectors know the
mechanism, the walk's own audit (that of a ladder step declaring it,
klineage.mechanisms.audit.audit_ladder_step) holds the step to removing exactly that mechanism.
Forward re-derivation is asked of the model on the simpler kernel (never a reversed diff) and must
pass the walk's >= 0.99x gate. Each call is budgeted: when the budget is spent the proposer raises
BudgetExhausted and the walk ends with termination `budget`.
"""
from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from klineage.mechanisms import registry
from klineage.mechanisms.base import Feature
from klineage.lineage.proposal import Proposal
from klineage.templates import template_module

KEYS = {"mechanism": str, "locus": str, "backward_edit": str, "features_before": list, "features_after": list,
        "evidence_lines": list, "kernel": str}
MAX_CALLS_PER_STATE = 3
_JSON_RE = re.compile(r"```json[ \t]*\n(.*?)\n```", re.S)


class LLMProposalError(Exception):
    """An answer that is not a proposal (parsed strictly)."""


@dataclass(frozen=True)
class _Rejected:
    """What the walk records for an answer rejected before the gate (it reads .key/.mechanism/.locus)."""
    mechanism: str
    locus: str
    call: int

    @property
    def key(self):
        return ("llm", self.mechanism, self.locus, self.call)


def _templates():
    return template_module(Path(__file__).parent / "templates", "llm_backward.j2")


def numbered(source: str) -> str:
    return "\n".join(f"{i:4d}| {line}" for i, line in enumerate(source.splitlines(), start=1))


def parse_proposal(text: str) -> dict:
    """The proposal object of an answer, or a done answer {"done": True, "reason": str}; strict."""
    blocks = _JSON_RE.findall(text)
    if len(blocks) != 1:
        raise LLMProposalError(f"expected exactly one ```json block, found {len(blocks)}")
    try:
        obj = json.loads(blocks[0])
    except json.JSONDecodeError as e:
        raise LLMProposalError(f"the json block does not parse: {e}") from None
    if not isinstance(obj, dict):
        raise LLMProposalError("the json block is not an object")
    if "done" in obj:
        if set(obj) != {"done", "reason"} or obj["done"] is not True or not isinstance(obj["reason"], str):
            raise LLMProposalError('a done answer is exactly {"done": true, "reason": "..."}')
        return obj
    missing, extra = sorted(set(KEYS) - set(obj)), sorted(set(obj) - set(KEYS))
    if missing or extra:
        raise LLMProposalError(f"keys: missing {missing}, unexpected {extra}")
    for k, t in KEYS.items():
        if not isinstance(obj[k], t):
            raise LLMProposalError(f"{k} must be a {t.__name__}")
    if not obj["mechanism"].strip() or not re.fullmatch(r"[a-z][a-z0-9_]*", obj["mechanism"].strip()):
        raise LLMProposalError(f"mechanism {obj['mechanism']!r} is not a snake_case name")
    if not all(isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) for x in r) for r in obj["evidence_lines"]):
        raise LLMProposalError("evidence_lines must be [[first, last], ...] of line numbers")
    if 'extern "C"' not in obj["kernel"]:
        raise LLMProposalError('the kernel has no extern "C" entry point')
    if not all(isinstance(f, str) for f in obj["features_before"] + obj["features_after"]):
        raise LLMProposalError("features_before and features_after must be lists of mechanism names")
    mech, before, after = obj["mechanism"].strip(), set(obj["features_before"]), set(obj["features_after"])
    if mech not in before:
        raise LLMProposalError(f"features_before does not list the mechanism removed ({mech})")
    if after - before or before - after - {mech}:
        raise LLMProposalError(f"the declared features are not one removal of {mech}: added "
                               f"{sorted(after - before)}, also removed {sorted(before - after - {mech})}")
    return obj


def format_proposal(obj: dict, preface: str = "") -> str:
    """An answer holding `obj` as the proposer asks for it (the inverse of parse_proposal)."""
    return (preface + "\n\n" if preface else "") + "```json\n" + json.dumps(obj, indent=1) + "\n```\n"


def changed_lines(current: str, simpler: str) -> set[int]:
    """Line numbers of `current` (from 1) that the edit to `simpler` replaces or deletes; an
    insertion counts the line it goes before."""
    changed = set()
    sm = difflib.SequenceMatcher(a=current.splitlines(), b=simpler.splitlines(), autojunk=False)
    for op, i1, i2, _, _ in sm.get_opcodes():
        if op != "equal":
            changed.update(range(i1 + 1, max(i2, i1 + 1) + 1))
    return changed


def check_citations(current: str, simpler: str, ranges: list[list[int]]) -> str | None:
    """None when every cited range exists in `current` and some cited line is changed by the edit;
    else the reason."""
    n = len(current.splitlines())
    if not ranges:
        return "no evidence lines cited"
    for a, b in ranges:
        if not 1 <= a <= b <= n:
            return f"cited lines {a}-{b} do not exist (the kernel has {n} lines)"
    changed = changed_lines(current, simpler)
    if not any(a <= ln <= b for a, b in ranges for ln in changed):
        return "none of the cited lines is changed by the proposed edit"
    return None


class LLMProposer:
    """Proposer protocol of klineage.lineage.proposers, over klineage.llm.LLMSession.ask."""
    name = "llm"

    def __init__(self, llm, calls_per_state: int = MAX_CALLS_PER_STATE):
        self.llm = llm
        self.calls_per_state = calls_per_state
        self.removed: list[str] = []
        self.log: list[dict] = []  # every call: state, prompt hash, cost, verdict
        self._t = _templates()
        mechs = [{"name": m.NAME, "description": getattr(m, "DESCRIPTION", "")} for m in registry().values()]
        self._prefix = str(self._t.prefix(sorted(mechs, key=lambda m: m["name"])))

    def prompt(self, source: str, features: list[Feature], feedback: str | None) -> tuple[str, str]:
        kinds = sorted({f.mechanism for f in features})
        return self._prefix, str(self._t.variable(numbered(source), kinds, self.removed, feedback))

    def propose(self, source: str, features: list[Feature], tried: set) -> Iterator[Proposal | tuple]:
        feedback = None
        for call in range(self.calls_per_state):
            ex = self.llm.ask(*self.prompt(source, features, feedback), parse=None)
            entry = {"prompt_hash": ex.prompt_hash, "cost_usd": ex.cost_usd, "attempts": ex.attempts}
            try:
                obj = parse_proposal(ex.text)
            except LLMProposalError as e:
                feedback = f"the answer was not a proposal: {e}"
                self.log.append({**entry, "verdict": "llm_parse", "reason": str(e)})
                yield _Rejected("unknown", f"llm call {call}", call), f"llm_parse: {e}"
                continue
            if obj.get("done"):
                self.log.append({**entry, "verdict": "done", "reason": obj["reason"]})
                return
            mech, locus = obj["mechanism"].strip(), obj["locus"].strip()
            if (mech, locus) in tried:
                feedback = f"{mech} at {locus} was already tried"
                self.log.append({**entry, "verdict": "repeat", "reason": feedback})
                continue
            why = check_citations(source, obj["kernel"], obj["evidence_lines"])
            if why:
                feedback = f"citation check: {why}"
                self.log.append({**entry, "verdict": "llm_citation", "reason": why})
                yield _Rejected(mech, locus, call), f"llm_citation: {why}"
                continue
            self.log.append({**entry, "verdict": "proposed", "mechanism": mech})
            yield Proposal(self.name, mech, locus, obj["kernel"], config={"backward_edit": obj["backward_edit"],
                                                                          "evidence_lines": obj["evidence_lines"],
                                                                          "features_before": obj["features_before"],
                                                                          "features_after": obj["features_after"],
                                                                          "prompt_hash": ex.prompt_hash},
                           anchor=locus, declared=True)
            feedback = "the last proposal was rejected by the gate or the audit"

    def rederive(self, proposal: Proposal) -> str | None:
        from klineage.llm import parse_kernel
        text = str(self._t.forward(proposal.mechanism, proposal.locus, proposal.config.get("backward_edit", ""),
                                   proposal.source))
        ex = self.llm.ask(self._prefix, text, parse=parse_kernel)
        self.log.append({"prompt_hash": ex.prompt_hash, "cost_usd": ex.cost_usd, "verdict": "rederive",
                         "ok": ex.kernel is not None, "reason": ex.error})
        if ex.kernel is not None:
            self.removed.append(proposal.mechanism)
        return ex.kernel
