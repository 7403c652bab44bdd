"""Where a held-out condition's skills and kernels come from: the library by the workloads each skill
was mined from (the foreign control's cut of it), the random control's seed, and a final kernel as
it ran. Read by the run
(klineage.heldout.run) and its report (klineage.heldout.report).
"""
from __future__ import annotations

import hashlib
import re

from klineage.apply.materialize import bake
from klineage.apply.retrieve import workload_facts


def skill_sources(store, library: list[dict]) -> dict[str, list[str]]:
    """{skill_id: workloads it was mined from}: its evidence's lineages, and its cards' measured cases."""
    by_evidence = store.skill_source_workloads()
    out = {}
    for s in library:
        cases = {c.get("workload") for c in (s["card"].get("effects") or {}).get("per_case") or [] if c.get("workload")}
        out[s["skill_id"]] = sorted(set(by_evidence.get(s["skill_id"], [])) | cases)
    return out


def foreign_library(library: list[dict], sources: dict[str, list[str]], families: tuple[str, ...]) -> list[dict]:
    """The skills every one of whose source workloads has a family in `families` (a skill with an
    unknown source family is never foreign)."""
    keep = []
    for s in library:
        fams = {workload_facts(w)[0] for w in sources.get(s["skill_id"], [])}
        if fams and "" not in fams and fams <= set(families):
            keep.append(s)
    return keep


def _flags_config(flags) -> dict[str, int]:
    out = {}
    for f in flags or ():
        m = re.fullmatch(r"-D(\w+)=(-?\d+)", f)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def produced_source(source: str, flags) -> str:
    """The kernel as it ran: sweep flags written into its source."""
    cfg = _flags_config(flags)
    return bake(source, cfg) if cfg else source


def random_seed(seed: int, instance: str) -> int:
    """The random control's seed for one instance: its own stream, the same on every machine."""
    return int(hashlib.sha256(f"{seed}:{instance}".encode()).hexdigest()[:8], 16)
