"""The audit of a backward step, computed from both kinds of evidence — never an opinion.

A feature is present when its source detector or the compiler's evidence says so
(klineage.mechanisms.evidence). The feature lists the walk passes come from
klineage.mechanisms.detect_all (the forms the rewrites take) and carry their source text, so the
audit adds the idiom forms the detectors see but no rewrite takes (detect_seen) and the compiler's
view of the same two kernels (PTX with line info, cached); lists without a source, or kernels that do
not compile to PTX, are audited on the given features alone, and the record says why
(`compiler_unavailable`).

Rules steps: exactly the declared (mechanism, locus) is gone and every other feature is kept, and
no feature appears. The compiler side, compared per family and compiled kernel (line attribution
moves when a loop is unrolled or a helper inlined; presence in a kernel does not), adds the
mechanisms the source detectors do not see (an unfamiliar idiom) and catches a rewrite that silently
changes the generated code elsewhere: a family the source keeps that the compiler no longer (or only
now) sees, or a removed mechanism the code still has. Versions steps (read
forward, K_{i-1} -> K_i): no mechanism kind of K_{i-1} is lost; the kinds K_i adds are exactly the
declared mechanism (with its companions) when a detector knows it, and none when the declared
mechanism is one no detector sees (a structural step such as warp_per_row) or one a family covers
(a ladder's `smem_tiling` is what the compiler sees as smem_staging, Mechanism.COVERS); a
mechanism may take over another (asynchronous copies replace the register path of staging,
Mechanism.REPLACES). A rung that adds two kinds is seen as bundled, whichever evidence saw them. Forward re-derivation: the re-derived kernel has
exactly the richer kernel's features, by both kinds of evidence.

The record of a step keeps its source-detector form when the compiler's evidence does not change
the verdict; otherwise a `compiler` entry names what the compiler saw that decided it.
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


def _evidence(fs):
    """The united evidence of the kernel a feature list was read from, or (None, why not)."""
    source = getattr(fs, "source", None)
    if source is None:
        return None, "the feature list does not carry its source"
    from klineage.mechanisms.evidence import evidence
    ev = evidence(source)
    if ev.compiled is None or not ev.compiled.ok:
        return None, f"no PTX: {ev.compiler_error or 'the source does not compile'}"
    return ev, ""


def _compiler_view(before, after):
    """(evidence before, evidence after, why unavailable)."""
    eb, why_b = _evidence(before)
    if eb is None:
        return None, None, why_b
    ea, why_a = _evidence(after)
    if ea is None:
        return None, None, why_a
    return eb, ea, ""


def _presence(ev) -> dict:
    from klineage.mechanisms.evidence import presence
    return presence(ev)


def _pairs(keys) -> list[list[str]]:
    return [list(k) for k in sorted(keys)]


def audit_rules(before: list[Feature], after: list[Feature], mechanism: str, locus: str) -> dict:
    b, a = _keys(before), _keys(after)
    removed, added = sorted(b - a), sorted(a - b)
    ok = removed == [(mechanism, locus)] and not added
    why = "" if ok else (f"expected exactly {mechanism} at {locus} removed; removed {removed or 'nothing'}"
                         + (f", added {added}" if added else ""))
    out = {"ok": ok, "kind": "rules", "removed": [list(x) for x in removed], "added": [list(x) for x in added],
           "kept": len(b & a), "reason": why}
    if not ok:
        return out  # the compiler's evidence can only add reasons to refuse
    eb, ea, unavailable = _compiler_view(before, after)
    if eb is None:
        out["compiler_unavailable"] = unavailable
        return out
    span = next((f.lines for f in before if f.key == (mechanism, locus)), None)
    found = _compiled_changes(_presence(eb), _presence(ea), mechanism,
                              _at_change(eb, ea, span) if span is not None else None)
    if found:
        out.update(ok=False, compiler=found,
                   reason=f"{mechanism} at {locus} is removed in the source, but the generated code says otherwise: "
                          + "; ".join(f"{k.replace('_', ' ')} {v}" for k, v in found.items()))
    return out


def _at_change(eb, ea, span: tuple[int, int]):
    """A test of whether a family's compiler sites in one kernel all sit where the rewrite acted: within
    the removed feature's lines (the simpler kernel's lines are mapped back to the richer one's by a
    line diff; a line the rewrite put in counts at the place it was put). Unrolling a loop changes the
    code of its body; that is the step, not a change elsewhere."""
    import difflib
    rich = eb.compiled.k.source.splitlines()
    simple = ea.compiled.k.source.splitlines()
    back: dict[int, int] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, rich, simple, autojunk=False).get_opcodes():
        for j in range(j1, j2):
            back[j + 1] = i1 + (j - j1) + 1 if tag == "equal" else min(i1 + 1 + (j - j1), max(i2, i1 + 1))

    def inside(line: int, simpler: bool) -> bool:
        line = back.get(line, line) if simpler else line
        return span[0] <= line <= span[1]

    def test(ev, family: str, kernel: str, simpler: bool) -> bool:
        sites = [s for f in ev.found if f.feature.mechanism == family for s in f.sites if s.kernel == kernel]
        return bool(sites) and all(any(inside(ln, simpler) for ln in s.lines) for s in sites)
    return lambda key, side: test(eb if side == "before" else ea, key[0], key[1], side == "after")


def _compiled_changes(pb: dict, pa: dict, mechanism: str, at_change=None) -> dict:
    """What the united evidence saw change across a rules step, by (family, compiled kernel): a family
    other than the removed one leaves a kernel or enters one (`removed`, `added`: the compiler's
    evidence, or the source detectors' through the kernel's calls); a family the source keeps in a
    kernel is compiled there no longer, or only now (`no_longer_compiled`, `newly_compiled`); the
    removed mechanism is gone from a kernel's source but not from its code (`still_compiled`). A change
    whose every site sits where the rewrite acted (`at_change`) is the step itself, not counted."""
    get = lambda p, key: p.get(key, (False, False))  # noqa: E731
    here = at_change or (lambda key, side: False)
    out: dict[str, list] = {"removed": [], "added": [], "no_longer_compiled": [], "newly_compiled": [],
                            "still_compiled": []}
    for key in sorted(pb.keys() | pa.keys()):
        (sb, cb), (sa, ca) = get(pb, key), get(pa, key)
        own = key[0] == mechanism
        if (sb or cb) and not (sa or ca) and not own and not here(key, "before"):
            out["removed"].append(key)
        elif (sa or ca) and not (sb or cb) and not here(key, "after"):
            out["added"].append(key)
        elif sb and sa and cb != ca and not here(key, "before" if cb else "after"):
            out["no_longer_compiled" if cb else "newly_compiled"].append(key)
        elif own and sb and not sa and ca:
            out["still_compiled"].append(key)
        elif not sb and not sa and cb != ca and not (own and cb) and not here(key, "before" if cb else "after"):
            out["removed" if cb else "added"].append(key)
    return {k: _pairs(v) for k, v in out.items() if v}


def covered_by(mechanism: str) -> set[str]:
    """Detectable families whose evidence covers a mechanism a ladder declares under another name
    (Mechanism.COVERS)."""
    from klineage.mechanisms import registry
    return {m.NAME for m in registry().values() if mechanism in getattr(m, "COVERS", ())}


def replaced_by(mechanisms) -> set[str]:
    """Mechanisms the given ones take over when they enter a kernel (Mechanism.REPLACES)."""
    from klineage.mechanisms import registry
    reg = registry()
    return {r for m in mechanisms if m in reg for r in getattr(reg[m], "REPLACES", ())}


def audit_version(before: list[Feature], after: list[Feature], mechanism: str, known: set[str]) -> dict:
    """`before` = richer K_i, `after` = simpler K_{i-1}; `known` = mechanism names detectors find.
    Judged on the united evidence; the record is the source detectors' unless the compiler's evidence
    changes the verdict, and then names what it saw (`compiler`)."""
    source_only = _version_verdict(before, after, mechanism, known)
    eb, ea, unavailable = _compiler_view(before, after)
    if eb is None:
        source_only["compiler_unavailable"] = unavailable
        return source_only
    united = _version_verdict([f.feature for f in eb.found], [f.feature for f in ea.found], mechanism, known)
    if united["ok"] == source_only["ok"]:
        return source_only
    united["compiler"] = _compiler_decided(before, after, eb, ea)
    return united


def _version_verdict(before: list[Feature], after: list[Feature], mechanism: str, known: set[str]) -> dict:
    kinds_rich = {f.mechanism for f in before}
    kinds_simple = {f.mechanism for f in after}
    lost_forward = sorted(kinds_simple - kinds_rich)
    added_forward = sorted(kinds_rich - kinds_simple)
    count_rich = sum(f.mechanism == mechanism for f in before)
    count_simple = sum(f.mechanism == mechanism for f in after)
    if mechanism not in added_forward and count_rich > count_simple:
        # the declared mechanism enters again where the kernel already had one of its kind (a second
        # per-thread count beside a grid-stride loop): the step adds it all the same
        added_forward = sorted(added_forward + [mechanism])
    covers = covered_by(mechanism)
    # a kind that a mechanism both kernels hold takes over (Mechanism.REPLACES) is no new kind when it
    # appears: a register-path staging loop in a fallback kernel beside the asynchronous copies it
    # stands in for
    held = replaced_by(kinds_rich & kinds_simple)
    added_new = [a for a in added_forward if a == mechanism or a not in held]
    if mechanism in known:
        allowed = {mechanism} | COMPANIONS.get(mechanism, frozenset())
        replaced = replaced_by(allowed)
        ok = set(lost_forward) <= replaced and set(added_new) <= allowed and count_rich > count_simple
        expect = f"only {mechanism} added" + (f" (with its companions {sorted(allowed - {mechanism})})"
                                              if allowed != {mechanism} else "") + \
            (f", nothing lost but {sorted(replaced)}, which it takes over" if replaced else "")
    elif covers:
        ok = not lost_forward and set(added_new) <= covers
        expect = f"no mechanism added other than {sorted(covers)}, which covers {mechanism}"
    else:
        ok = not lost_forward and not added_new
        expect = f"no detected mechanism added ({mechanism} is structural, not seen by detectors)"
    why = "" if ok else (f"{expect}; forward the step adds {added_forward or 'nothing'}"
                         + (f" and loses {lost_forward}" if lost_forward else ""))
    return {"ok": ok, "kind": "versions", "added_forward": added_forward, "lost_forward": lost_forward,
            "declared": mechanism, "detected": mechanism in known, "reason": why}


def _compiler_decided(before, after, eb, ea) -> dict:
    """The kinds the compiler's evidence changed, against the source detectors alone."""
    src_added = {f.mechanism for f in before} - {f.mechanism for f in after}
    src_lost = {f.mechanism for f in after} - {f.mechanism for f in before}
    all_added = {f.feature.mechanism for f in eb.found} - {f.feature.mechanism for f in ea.found}
    all_lost = {f.feature.mechanism for f in ea.found} - {f.feature.mechanism for f in eb.found}
    out = {"added": sorted(all_added - src_added), "lost": sorted(all_lost - src_lost),
           "not_added": sorted(src_added - all_added), "not_lost": sorted(src_lost - all_lost)}
    return {k: v for k, v in out.items() if v}


def audit_rederived(original: list[Feature], rederived: list[Feature]) -> dict:
    o, r = _keys(original), _keys(rederived)
    ok = o == r
    out = {"ok": ok, "missing": [list(x) for x in sorted(o - r)], "extra": [list(x) for x in sorted(r - o)],
           "reason": "" if ok else "the re-derived kernel does not have the original's features"}
    if not ok:
        return out
    eo, er, unavailable = _compiler_view(original, rederived)
    if eo is None:
        out["compiler_unavailable"] = unavailable
        return out
    po, pr = _presence(eo), _presence(er)
    differ = sorted(key for key in po.keys() | pr.keys() if po.get(key, (False, False))[1] != pr.get(key, (False, False))[1])
    if differ:
        out.update(ok=False, compiler={"compiled_differently": _pairs(differ)},
                   reason="the re-derived kernel compiles to different mechanisms than the original: "
                          f"{_pairs(differ)}")
    return out


def audit_structural(before: list[Feature], after: list[Feature], mechanism: str, known: set[str],
                     shape_before: set[str], shape_after: set[str]) -> dict:
    """A structural rewrite read forward (`before` -> `after`), audited as a ladder step is (by
    mechanism kinds: a structural rewrite moves and copies code, so the loci of the mechanisms it
    keeps move with it; audit_version), and by the shape recognisers' reading: `mechanism` is present
    after, nothing else they read appears and nothing goes."""
    v = audit_version(after, before, mechanism, known)
    from klineage.mechanisms import registry
    family = registry().get(mechanism)
    written = frozenset(getattr(family, "WRITTEN_WITH", ()))
    if not v["ok"] and written and not v["lost_forward"] and set(v["added_forward"]) - {mechanism} <= written:
        v = {**v, "ok": True, "reason": "", "companions": sorted(set(v["added_forward"]) & written)}
    gone, came = sorted(shape_before - shape_after), sorted(shape_after - shape_before)
    shape_ok = not gone and set(came) <= {mechanism} and mechanism in shape_after
    why = v["reason"]
    if not shape_ok:
        why = "; ".join(filter(None, [why, f"the shape recogniser reads {came or 'nothing'} added"
                                     + (f" and {gone} gone" if gone else "") + f" (expected {mechanism} added)"]))
    return {**v, "kind": "structural", "ok": v["ok"] and shape_ok, "shape_added": came, "shape_lost": gone,
            "reason": why}
