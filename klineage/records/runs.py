"""The rows the runs over the library write step by step: an apply run's step and a held-out
row (one instance under one condition). Both are open records: the named keys are the ones the
store files in columns; the rest of what the run recorded is kept as given."""
from __future__ import annotations

from typing import Annotated, Optional

from pydantic import Field

from klineage.records.base import Number, Open


class ApplyStep(Open):
    """One decided step of an apply run: the start, a candidate the gate judged, or a backend that
    produced no kernel. Rewritten when a re-measurement keeps or drops it."""
    seq: int
    kind: str
    backend: str
    status: Optional[str]
    accepted: bool
    skill_id: Optional[str] = None
    kernel_hash: Optional[str] = None
    eval_key: Optional[str] = None


class HeldoutRow(Open):
    """The outcome of one held-out instance under one condition."""
    instance: str
    condition: str
    family: str
    status: str
    speedup: Optional[Number] = None
    ci95: Optional[Annotated[list[Optional[Number]], Field(min_length=2, max_length=2)]] = None
    latency_us: Optional[Number] = None
    reference_us: Optional[Number] = None
    kernel_hash: Optional[str] = None
