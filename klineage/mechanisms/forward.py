"""Writing a mechanism into a kernel: its family's reoptimize, else a shape rewriter's structural
rewrite, kept only when the evidence says it added the mechanism and nothing else. Admission and the
apply stage's rules materializer both write skills in through here."""
from __future__ import annotations

from klineage.mechanisms import Applied, Kernel, detect_all, registry
from klineage.mechanisms import shapes
from klineage.gate.compile import DEFAULT_ARCH
from klineage.mechanisms.audit import audit_structural, match_features, seen
from klineage.records import SkillCard, to_plain


def holds(features, arch: str = DEFAULT_ARCH) -> set[str]:
    """The mechanisms a kernel holds, by the evidence `klineage features` prints (its source forms and
    the compiler's evidence for `arch`), for the kernel a detect_all list was read from."""
    return {f.feature.mechanism for f in seen(features, arch)[0]}


def has_forward_rewrite(mechanism: str, structural: bool = True) -> bool:
    """Whether some rewrite adds `mechanism`: its family's reoptimize, or (with `structural`) a shape
    rewriter."""
    m = registry().get(mechanism)
    return (m is not None and not m.STRUCTURAL) or (structural and shapes.knows(mechanism))


def shape_config(card: SkillCard | None) -> dict:
    """What a shape rewriter reads of a card to choose its parameters: the anchor and the measured
    configurations of the kernels the skill was mined from (as plain dicts)."""
    if card is None:
        return {}
    return {"anchor": card.anchor.signature, "measured": [to_plain(m) for m in card.carrier.measured_configuration]}


def rewrite_for(mechanism: str, source: str, requires: list[str], config: dict | None = None,
                card: SkillCard | None = None, workload=None, structural: bool = True,
                arch: str = DEFAULT_ARCH) -> tuple[str, dict] | None:
    """M's forward rewrite on `source` if it adds M (and nothing else) where `requires` hold: the
    family's reoptimize (with `config`, a card's example configuration, first), else (with
    `structural`) a shape rewriter's structural rewrite with the parameters of `card`. What `source`
    holds is read as `klineage features` reads it (every source form, the compiler's evidence for
    `arch`) and what the shape recognisers read; a rewritten kernel keeps every feature it had, each
    itself (klineage.mechanisms.audit.match_features), and adds only M."""
    mech = registry().get(mechanism)
    if mech is not None and not mech.STRUCTURAL:
        base = detect_all(source)
        if set(requires) <= holds(base, arch) | shapes.shape_mechanisms(source, workload):
            for cfg in ([config] if config else []) + [None]:
                try:
                    res = mech.reoptimize(Kernel(source), None, cfg)
                except Exception:  # a rewrite that trips on an unfamiliar kernel simply does not apply
                    continue
                if not isinstance(res, Applied):
                    continue
                gone, added, _ = match_features(base, detect_all(res.source))
                if not gone and added and all(m == mechanism for m, _ in added):
                    return res.source, {"locus": res.locus, "config": res.config, "added": sorted(map(list, added))}
    if not structural or not shapes.knows(mechanism):
        return None
    # the recognisers first: most kernels are of no shape a rewriter knows, and detection costs more
    res = shapes.structural_rewrite(mechanism, source, shape_config(card), workload)
    if not isinstance(res, Applied):
        return None
    feats, shape_before = detect_all(source), shapes.shape_mechanisms(source, workload)
    if not set(requires) <= holds(feats, arch) | shape_before:
        return None
    after = detect_all(res.source)
    known = {m.NAME for m in registry().values() if m.DETECTABLE}
    au = audit_structural(feats, after, mechanism, known, shape_before, shapes.shape_mechanisms(res.source, workload),
                          arch)
    if not au["ok"]:
        return None
    added = sorted(list(k) for k in {f.key for f in after} - {f.key for f in feats} if k[0] == mechanism)
    return res.source, {"locus": res.locus, "config": res.config, "added": added, "audit": "structural"}
