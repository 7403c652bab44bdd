"""The audit of a backward step, computed from detector features — never an opinion.

Rules steps: exactly the declared (mechanism, locus) is gone and every other feature is kept, and
no feature appears. Versions steps (read forward, K_{i-1} -> K_i): no mechanism kind of K_{i-1}
is lost; the kinds K_i adds are exactly the declared mechanism when a detector knows it, and none
when the declared mechanism is one no detector sees (a structural step such as warp_per_row).
Forward re-derivation: the re-derived kernel has exactly the richer kernel's features.
"""
from __future__ import annotations

from klineage.mechanisms.base import Feature

# Mechanisms that enter a kernel together in one step by the granularity rules: a software pipeline
# is its asynchronous copies and the ring of stage buffers they fill (neither is written without the
# other). A versions step declaring one may add the other.
COMPANIONS: dict[str, frozenset[str]] = {
    "async_copy": frozenset({"multistage_buffer"}),
    "multistage_buffer": frozenset({"async_copy"}),
}


def _keys(fs: list[Feature]) -> set:
    return {f.key for f in fs}


def audit_rules(before: list[Feature], after: list[Feature], mechanism: str, locus: str) -> dict:
    b, a = _keys(before), _keys(after)
    removed, added = sorted(b - a), sorted(a - b)
    ok = removed == [(mechanism, locus)] and not added
    why = "" if ok else (f"expected exactly {mechanism} at {locus} removed; removed {removed or 'nothing'}"
                         + (f", added {added}" if added else ""))
    return {"ok": ok, "kind": "rules", "removed": [list(x) for x in removed], "added": [list(x) for x in added],
            "kept": len(b & a), "reason": why}


def audit_version(before: list[Feature], after: list[Feature], mechanism: str, known: set[str]) -> dict:
    """`before` = richer K_i, `after` = simpler K_{i-1}; `known` = mechanism names detectors find."""
    kinds_rich = {f.mechanism for f in before}
    kinds_simple = {f.mechanism for f in after}
    lost_forward = sorted(kinds_simple - kinds_rich)
    added_forward = sorted(kinds_rich - kinds_simple)
    count_rich = sum(f.mechanism == mechanism for f in before)
    count_simple = sum(f.mechanism == mechanism for f in after)
    if mechanism in known:
        allowed = {mechanism} | COMPANIONS.get(mechanism, frozenset())
        ok = not lost_forward and set(added_forward) <= allowed and count_rich > count_simple
        expect = f"only {mechanism} added" + (f" (with its companions {sorted(allowed - {mechanism})})"
                                              if allowed != {mechanism} else "")
    else:
        ok = not lost_forward and not added_forward
        expect = f"no detected mechanism added ({mechanism} is structural, not seen by detectors)"
    why = "" if ok else (f"{expect}; forward the step adds {added_forward or 'nothing'}"
                         + (f" and loses {lost_forward}" if lost_forward else ""))
    return {"ok": ok, "kind": "versions", "added_forward": added_forward, "lost_forward": lost_forward,
            "declared": mechanism, "detected": mechanism in known, "reason": why}


def audit_rederived(original: list[Feature], rederived: list[Feature]) -> dict:
    o, r = _keys(original), _keys(rederived)
    ok = o == r
    return {"ok": ok, "missing": [list(x) for x in sorted(o - r)], "extra": [list(x) for x in sorted(r - o)],
            "reason": "" if ok else "the re-derived kernel does not have the original's features"}


def audit_structural(before: list[Feature], after: list[Feature], mechanism: str, known: set[str],
                     shape_before: set[str], shape_after: set[str]) -> dict:
    """A structural rewrite read forward (`before` -> `after`), audited as a ladder step is (by
    mechanism kinds: a structural rewrite moves and copies code, so the loci of the mechanisms it
    keeps move with it; audit_version), and by the shape recognisers' reading: `mechanism` is present
    after, nothing else they read appears and nothing goes."""
    v = audit_version(after, before, mechanism, known)
    gone, came = sorted(shape_before - shape_after), sorted(shape_after - shape_before)
    shape_ok = not gone and set(came) <= {mechanism} and mechanism in shape_after
    why = v["reason"]
    if not shape_ok:
        why = "; ".join(filter(None, [why, f"the shape recogniser reads {came or 'nothing'} added"
                                     + (f" and {gone} gone" if gone else "") + f" (expected {mechanism} added)"]))
    return {**v, "kind": "structural", "ok": v["ok"] and shape_ok, "shape_added": came, "shape_lost": gone,
            "reason": why}
