"""The skill card: what lineage/lift.py writes for each skill and every reader of the library reads.

Field order follows the card as lift builds it. Keys that only some producers write are optional
fields (absent when not given, see klineage.records.base.to_plain) or, on the open records, kept
as given. ``SkillCard.model_validate(card)`` checks a stored card; ``to_json(card)`` is the
``card_json`` column.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, field_validator

from klineage.records.base import Closed, Number, Open, Scalar

CATEGORIES = ("data_types", "layout", "storage", "pipeline", "hardware")
Pair = Annotated[list[str], Field(min_length=2, max_length=2)]  # (anchor, mechanism)


class Anchor(Closed):
    signature: str
    query: str  # the tree-sitter query that finds the anchor (or why none: declared by a ladder)
    paths: list[str]


class ConfigValue(Open):
    """One tuning constant of a kernel (klineage.tuning.configuration)."""
    name: str
    role: str
    value: Number
    axis: Optional[str] = None


class MeasuredConfiguration(Closed):
    workload: str
    kernel: str  # the richer kernel's hash, 12 characters
    values: list[ConfigValue]


class Carrier(Closed):
    before: str
    after: str
    forward_rewrite: str
    example_configuration: list[dict[str, Scalar]]
    measured_configuration: list[MeasuredConfiguration]
    diff: str


class Precondition(Open):
    condition: str
    fails_without: str
    evidence: str
    source: Literal["declared", "domain", "static", "probe", "compile"]
    lines: Optional[list[int]] = None
    kernel: Optional[str] = None
    probe: Optional[str] = None
    eval_key: Optional[str] = None


class Case(Closed):
    """The measured effect of one transition on one shape."""
    workload: str
    shape: dict[str, Any]
    shape_text: str
    platform: str
    speedup: Number
    trial_speedups: list[Number]
    spread: Number
    workers: int
    worker_speedups: list[Number]
    label: Literal["faster", "slower", "neutral"]
    richer_us: Number
    simpler_us: Number
    transition_id: str


class Effects(Closed):
    median_speedup: Number
    spread: Number  # the largest trial-to-trial spread of any case
    case_range: Annotated[list[Number], Field(min_length=2, max_length=2)]
    per_case: list[Case]


class Risk(Open):
    """A rejected attempt, a violating probe, or a failed admission roundtrip."""
    kind: str
    message: str
    workload: Optional[str] = None
    status: Optional[str] = None
    eval_key: Optional[str] = None
    locus: Optional[str] = None
    lineage_id: Optional[str] = None
    failing_shapes: Optional[list[Any]] = None
    probe: Optional[str] = None
    transition_id: Optional[str] = None


class Probing(Closed):
    probed: bool
    tried: list[str]
    violating: list[str]
    summary: str


class Scope(Closed):
    cases: list[str]
    languages: list[str]
    platforms: list[str]
    prior_mechanisms: list[str]
    measured_platforms: list[str]
    compile_checked: dict[str, Literal["compiles", "fails"]]


class Rederivation(Closed):
    """The check that re-applying a transition's rewrite gives its kernel back, as fast."""
    transition_id: str
    identical: bool
    rederived_hash: Optional[str]
    eval_rederived: str
    ratios: list[Number]
    ok: bool


class AdmissionTrial(Open):
    """One admission roundtrip: the skill applied to another workload's kernel, gated."""
    workload: str
    ok: bool
    status: Optional[str] = None
    kind: Optional[Literal["admission"]] = None  # set in the card's verification log


class Admission(Closed):
    status: str
    reason: str
    trials: list[AdmissionTrial]
    claim: Optional[str] = None


class SkillCard(Closed):
    skill_id: str
    name: str
    mechanism: str
    anchor: Anchor
    carrier: Carrier
    preconditions: dict[str, list[Precondition]]
    effects: Effects
    evidence: list[str]  # transition ids
    evaluations: list[str]  # eval keys
    risks: list[Risk]
    risks_empty_reason: str
    probing: Probing
    scope: Scope
    provides: list[Pair]
    requires: list[Pair]
    conflicts: list[Pair]
    verification: list[Union[Rederivation, AdmissionTrial]]
    source_lineages: list[str]
    intent: str
    admission: Admission

    @field_validator("preconditions")
    @classmethod
    def _known_categories(cls, v: dict) -> dict:
        unknown = sorted(set(v) - set(CATEGORIES))
        if unknown:
            raise ValueError(f"precondition categories {unknown} are not among {list(CATEGORIES)}")
        return v


def as_card(card: "SkillCard | dict") -> "SkillCard":
    """`card` as a SkillCard: a record passes through, a plain card is validated (ValueError when it
    is not one)."""
    return card if isinstance(card, SkillCard) else SkillCard.model_validate(card)


class SkillRow(Closed):
    """A row of the skills table: the card with its markdown rendering."""
    skill_id: str
    name: str
    mechanism: str
    card: SkillCard
    card_md: str
