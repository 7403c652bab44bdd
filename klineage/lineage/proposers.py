"""Proposers of backward steps, behind one interface and one registry.

A proposer looks at the current (richer) kernel and yields candidate simpler kernels, each with
the mechanism it claims to remove, the locus, and how to re-derive the richer kernel from the
simpler one (forward). The walk gates and audits every candidate the same way, whoever made it.

- `rules` (default): the deoptimize rewrites of klineage.mechanisms, in mechanisms.ORDER, loci in
  source order; forward re-derivation is the family's reoptimize on the simpler kernel.
- `versions`: a ladder of versions of one kernel (a folder `versions/` of .cu files with the
  workload's naive.cu below and expert.cu on top, or the git history of one file), walked in the
  order of the mechanisms each rung holds (klineage.lineage.ladder); forward re-derivation is the
  richer rung itself. A rung declares what it adds in its first line
  (`// klineage-step: mechanism=NAME[,NAME]`) or in versions/ladder.toml.
- `llm`: a model proposes each step (klineage.lineage.llm_proposer), behind the same gate and audit.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from klineage.lineage.ladder import (ProposerError, RungOrder, Version, ladder_from_folder, parent_index,
                                     structural_held)
from klineage.gate.compile import DEFAULT_ARCH
from klineage.mechanisms.audit import audit_ladder_step, seen
from klineage.lineage.proposal import Proposal, source_hash
from klineage.mechanisms import Kernel, order, registry
from klineage.mechanisms.base import Applied, Feature
from klineage.parse.source import launch_shapes


class RulesProposer:
    name = "rules"

    def __init__(self):
        self.mechanisms = registry()

    def propose(self, source: str, features: list[Feature], tried: set) -> Iterator[Proposal | tuple]:
        """Yields Proposal, or (feature, reason) for a removal whose rewrite did not apply."""
        k = Kernel(source)
        for mech_name in order():
            mech = self.mechanisms.get(mech_name)
            if mech is None:
                continue
            for f in features:
                if f.mechanism != mech_name or not f.removable or f.key in tried:
                    continue
                try:
                    res = mech.deoptimize(k, f)
                except Exception as e:  # a rewrite bug is a recorded rejection, never a dead walk
                    yield f, f"deoptimize raised {type(e).__name__}: {e}"
                    continue
                if not isinstance(res, Applied):
                    yield f, res.reason
                    continue
                yield Proposal(self.name, f.mechanism, f.locus, res.source, res.before, res.after, res.config,
                               anchor=f.anchor)

    def rederive(self, proposal: Proposal) -> str | None:
        mech = self.mechanisms[proposal.mechanism]
        try:
            res = mech.reoptimize(Kernel(proposal.source), proposal.locus, proposal.config)
        except Exception:
            return None
        return res.source if isinstance(res, Applied) else None


class VersionsProposer:
    """Steps between the rungs of a ladder (klineage.lineage.ladder): from each state, the rungs below
    it in the ladder's order, nearest first; a refused candidate is followed by the next one down (a
    compound step over the refused rung). Where a step would add several mechanisms and the rules
    can remove some of them from the richer kernel, those come off first as rules steps (the
    family's own rewrite, audited and re-derived as in the rules walk), so the ladder step that
    follows names fewer; the walk then stands on a kernel that is a rung less those mechanisms."""
    name = "versions"

    def __init__(self, ladder: list[Version], arch: str = DEFAULT_ARCH):
        from klineage.mechanisms import detect_all
        self.ladder, self.arch = ladder, arch
        self._index = {source_hash(v.source): i for i, v in enumerate(ladder)}
        # kernel hash -> (the rung it is, the mechanisms the rules removed from it on the way here)
        self._derived: dict[str, tuple[int, frozenset[str]]] = {}
        self.features = [detect_all(v.source) for v in ladder]
        self.detectable = {m.NAME for m in registry().values() if m.DETECTABLE}
        self.held = structural_held(ladder, self.detectable)
        self.parent = [parent_index(ladder, i) for i in range(len(ladder))]
        # the rungs are ordered by what the evidence reads in each (klineage.mechanisms.audit.seen)
        self.order = RungOrder([[f.feature for f in seen(fs, arch)[0]] for fs in self.features], self.held)
        self.rules = RulesProposer()

    @property
    def top(self) -> Version:
        return self.ladder[-1]

    def rung_of(self, source: str) -> tuple[int, frozenset[str]] | None:
        """(the rung index a kernel is or was peeled from, the mechanisms peeled off), or None."""
        h = source_hash(source)
        return (self._index[h], frozenset()) if h in self._index else self._derived.get(h)

    def propose(self, source: str, features: list[Feature], tried: set) -> Iterator[Proposal | tuple]:
        at = self.rung_of(source)
        if at is None:
            return
        base, peeled = at
        here = source_hash(source)
        cur = self.ladder[base]
        for r in self.order.candidates(base):
            pair = ("versions", here, r)
            if pair in tried:
                continue
            tried.add(pair)
            prev = self.ladder[r]
            declared = self._declared(base, r, peeled)
            audit, mechs = audit_ladder_step(features, self.features[r], declared, self.detectable, self.arch)
            moved = launch_change(prev.source, source) if not declared else ""
            if moved:  # kept in the step's audit; nothing is added where the step declares what it adds
                audit = {**audit, "warnings": [
                    f"the launch shape changes ({moved}) and {cur.label} declares no mechanism; the step is read as "
                    f"{'+'.join(mechs) or 'nothing'} from the detectors alone: declare what reshapes the launch "
                    "(// klineage-step: mechanism=NAME, or [steps] in versions/ladder.toml)"]}
            if audit["ok"] and len(mechs) > 1:
                yield from self._peel(source, features, mechs, declared, self.features[r], (base, peeled), tried)
            config = {"version": cur.label, "previous": prev.label}
            yield Proposal(self.name, "+".join(mechs) or "+".join(declared) or "unnamed", f"version:{cur.label}",
                           prev.source, before=f"{Path(cur.origin).name}", after=f"{Path(prev.origin).name}",
                           config=config, declared=True, origin=prev.origin, audit=audit, richer=source,
                           mechanisms=mechs if len(mechs) > 1 else ())

    def _declared(self, base: int, r: int, peeled: frozenset[str]) -> tuple[str, ...]:
        """What the step base -> r is declared to add: the structural names base holds and r does not,
        and the detectable names declared by base and by the rungs it was written from above r (those
        it still holds: a later rung may drop a mechanism again); less the ones already peeled off."""
        span, q = [base], self.parent[base]
        while q is not None and q != r and not self.order.below(q, r):
            span.append(q)
            q = self.parent[q]
        names = [n for i in span for n in self.ladder[i].mechanisms
                 if n in self.detectable and n not in peeled and (i == base or n in self.order.kinds[base])]
        return tuple(dict.fromkeys(names + sorted(self.held[base] - self.held[r])))

    def _peel(self, source, features, mechs, declared, simpler_feats, at, tried) -> Iterator[Proposal | tuple]:
        """Rules steps removing, one locus at a time, the mechanisms of a bundled step other than the
        one the ladder step keeps: its structural names, else the last declared of them in
        mechanisms.ORDER, else the last of them in that order."""
        ruled = [m for m in order() if m in mechs]
        keep = (set(mechs) - set(ruled)) or {([m for m in ruled if m in declared] or ruled)[-1]}
        gone = {f.key for f in features} - {f.key for f in simpler_feats}
        peel = [f for f in features if f.mechanism in ruled and f.mechanism not in keep and f.key in gone]
        base, peeled = at
        for prop in self.rules.propose(source, peel, tried):
            if isinstance(prop, Proposal):
                prop.proposer = self.name
                self._derived[source_hash(prop.source)] = (base, peeled | {prop.mechanism})
            yield prop

    def rederive(self, proposal: Proposal) -> str | None:
        if not proposal.declared:
            return self.rules.rederive(proposal)
        if proposal.richer is not None:
            return proposal.richer
        i = next((j for j, v in enumerate(self.ladder) if v.label == proposal.config["version"]), None)
        return self.ladder[i].source if i is not None else None

    def finish(self, lin: dict) -> None:
        """Record every rung the walk never stood on, with the reason (kind `not_on_chain`)."""
        on = {self.rung_of_hash(s["kernel_hash"]) for s in lin["states"]} - {None}
        if not on:
            return
        chain = sorted(on, key=lambda i: -self.order.height[i])
        low = chain[-1]
        refused = {r.get("rung") for r in lin["rejections"] if r.get("rung")}
        for i, v in enumerate(self.ladder):
            if i in on:
                continue
            top = len(self.ladder) - 1
            if not self.order.below(i, top):
                extra = sorted(self.order.kinds[i] - self.order.covers[top])
                why = f"it has {extra}, which the top of the ladder ({self.top.label}) lacks: not below it"
            elif self.order.below(i, low):
                why = f"the walk ended at {self.ladder[low].label}, above it"
            elif v.label in refused:
                why = "refused as the simpler kernel of a step (see the rejections above); the walk went past it"
            else:
                above = min((c for c in chain if self.order.below(i, c)), key=lambda c: self.order.height[c])
                nxt = max((c for c in chain if self.order.below(c, above) and c != above),
                          key=lambda c: self.order.height[c], default=None)
                extra = sorted(self.order.kinds[nxt] - self.order.kinds[i]) if nxt is not None else []
                why = (f"a branch off the chain: the walk went {self.ladder[above].label} -> "
                       f"{self.ladder[nxt].label if nxt is not None else '(end)'}, and this rung lacks {extra} "
                       f"that {self.ladder[nxt].label if nxt is not None else 'the end'} has")
            lin["rejections"].append({"step": len(lin["transitions"]), "mechanism": v.mechanism or "",
                                      "locus": f"version:{v.label}", "kind": "not_on_chain", "message": why,
                                      "kernel_hash": source_hash(v.source), "eval_key": None, "status": None,
                                      "rung": v.label})

    def rung_of_hash(self, h: str) -> int | None:
        """The rung a kernel hash is (peeled kernels are not rungs), or None."""
        return self._index.get(h)


PROPOSERS = ("rules", "versions", "llm")


def make_proposer(name: str, workload_dir: Path | None = None, llm=None, arch: str = DEFAULT_ARCH):
    """The proposer `name`; `arch` is the run's target, whose compiler evidence orders a ladder's rungs."""
    if name == "rules":
        return RulesProposer()
    if name == "versions":
        if workload_dir is None:
            raise ProposerError("the versions proposer needs a workload folder with a versions/ ladder")
        return VersionsProposer(ladder_from_folder(workload_dir), arch)
    if name == "llm":
        if llm is None:
            raise ProposerError("the llm proposer needs a model client: set ANTHROPIC_API_KEY (or --base-url for an "
                                "OpenAI-compatible server) and pass --proposer llm to klineage mine")
        from klineage.lineage.llm_proposer import LLMProposer
        return LLMProposer(llm)
    raise ProposerError(f"unknown proposer {name!r}: choose one of rules, versions, llm")


def launch_change(simpler: str, richer: str) -> str:
    """How a step read forward (simpler -> richer) changes the launches' (grid, block), in words, or ""
    when every launch keeps its shape."""
    a, b = launch_shapes(simpler), launch_shapes(richer)
    if sorted(a) == sorted(b):
        return ""
    text = lambda shapes: "; ".join(f"<<<{g}, {blk}>>>" for g, blk in shapes) or "no launch"  # noqa: E731
    return f"{text(a)} -> {text(b)}"
