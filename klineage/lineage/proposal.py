"""A proposed backward step, as every proposer (rules, versions, llm) hands it to the walk."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass
class Proposal:
    proposer: str
    mechanism: str
    locus: str
    source: str              # the simpler kernel
    before: str = ""         # code at the anchor in the richer kernel
    after: str = ""          # code at the anchor in the simpler kernel
    config: dict = field(default_factory=dict)
    anchor: str = ""
    declared: bool = False   # the mechanism is declared (versions), not computed by a detector
    origin: str | None = None  # path of the simpler kernel, when it is a file
    # versions steps: the audit the ladder computed (klineage.mechanisms.audit.audit_ladder_step), the
    # richer kernel (what the forward re-derivation restores) and, for a bundled step, its names
    audit: dict | None = None
    richer: str | None = None
    mechanisms: tuple[str, ...] = ()


def source_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
