"""A lineage and its parts as the store keeps them: the walk's states, its accepted transitions
(each names the three evaluations behind it) and its rejections."""
from __future__ import annotations

from typing import Any, Optional

from klineage.records.base import Closed, Open


class State(Open):
    idx: int
    kernel_hash: str
    eval_key: Optional[str] = None


class Transition(Open):
    """K_{i-1} -> K_i read backward: `mechanism` at `locus` removed from the richer kernel."""
    transition_id: str
    lineage_id: str
    step: int
    richer_hash: str
    simpler_hash: str
    mechanism: str
    anchor: str
    locus: str
    eval_richer: str
    eval_simpler: str
    eval_rederived: str
    effects: list[dict[str, Any]]
    features_richer: list[dict[str, Any]]
    features_simpler: list[dict[str, Any]]


class Rejection(Open):
    step: int
    mechanism: str
    locus: str
    kind: str
    message: str
    kernel_hash: Optional[str] = None
    eval_key: Optional[str] = None


class LineageRecord(Closed):
    lineage_id: str
    workload_name: str
    workload_hash: str
    proposer: str
    start_hash: str
    termination: str
    remaining: Any
    config: Any
    missing: list[Any]
    states: list[State]
    transitions: list[Transition]
    rejections: list[Rejection]
