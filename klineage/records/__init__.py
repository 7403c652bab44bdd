"""Typed records: the shapes the pipeline hands between its rooms, validated on construction.

Each record is a pydantic model; ``klineage.records.base.to_json`` is the one place a record
becomes the JSON the store writes (keys sorted, keys never given left out), and each model's
``model_validate`` the place stored JSON becomes a record again. The skill card's JSON Schema is
checked in beside it (skill_card.schema.json; ``python -m klineage.records.schema`` regenerates it).
"""
from klineage.records.base import to_json, to_plain
from klineage.records.evaluation import EvaluationRecord, EvaluationResult, Status
from klineage.records.lineage import LineageRecord, Rejection, Transition
from klineage.records.runs import ApplyStep, HeldoutRow
from klineage.records.skill_card import SkillCard, SkillRow, as_card

__all__ = ["ApplyStep", "EvaluationRecord", "EvaluationResult", "HeldoutRow", "LineageRecord", "Rejection", "SkillCard", "SkillRow", "Status", "as_card",
           "Transition", "to_json", "to_plain"]
