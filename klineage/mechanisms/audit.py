"""The audit of a backward step, computed from both kinds of evidence — never an opinion.

A feature is present when its source detector or the compiler's evidence says so
(klineage.mechanisms.evidence): every stage reads a kernel as `klineage features` prints it (`seen`).
The feature lists the walk passes come from klineage.mechanisms.detect_all (the forms the rewrites
take) and carry their source text, so the audit adds the idiom forms the detectors see but no rewrite
takes (detect_seen) and the compiler's view of the same two kernels (PTX with line info for the run's
target, cached); lists without a source, or kernels that do not compile to PTX, are audited on the
source forms alone, and the record says why (`compiler_unavailable`).

A feature keeps its identity across a step (match_features): the same (mechanism, locus), or, for
loci numbered among identical texts (`p + i#2`), the same text at the same place, by a line diff of
the two kernels; removing the first of three identical loads leaves the other two themselves.

Rules steps: exactly the declared (mechanism, locus) is gone and every other feature is kept, and
no feature appears; the forms no rule removes are kept too. The compiler side, compared per family
and compiled kernel (line attribution moves when a loop is unrolled or a helper inlined; presence in a
kernel does not), adds the mechanisms the source detectors do not see (an unfamiliar idiom) and
catches a rewrite that silently changes the generated code elsewhere: a family the source keeps that
the compiler no longer (or only now) sees, or a removed mechanism the code still has. Versions steps
(read forward, K_{i-1} -> K_i): no mechanism kind of K_{i-1} is lost; the kinds K_i adds are exactly
the declared mechanism (with its companions) when a detector knows it, and none when the declared
mechanism is one no detector sees (a structural step such as warp_per_row) or one a family covers
(a ladder's `smem_tiling` is what the compiler sees as smem_staging, Family.covers); a mechanism may
take over another (asynchronous copies replace the register path of staging, Family.replaces).
Where that plain reading refuses a ladder's step, the step is labelled with what the evidence says
it adds (audit_ladder_step): a rung that adds two kinds is seen as bundled, whichever evidence saw
them, and a declaration the evidence does not bear out is shown beside it, never the reason a step
the evidence reads is refused, nor a way past a refusal. Forward re-derivation: the re-derived kernel
has exactly the richer kernel's features, by both kinds of evidence.

The record of a step keeps its source-detector form when the compiler's evidence does not change
the verdict; otherwise a `compiler` entry names what the compiler saw that decided it.
"""
from __future__ import annotations

import re
from collections import Counter

from klineage.gate.compile import DEFAULT_ARCH
from klineage.mechanisms.base import Feature


def _keys(fs: list[Feature]) -> set:
    return {f.key for f in fs}


def _evidence(fs, arch: str = DEFAULT_ARCH):
    """The united evidence of the kernel a feature list was read from, compiled for `arch`, or (None,
    why not)."""
    source = getattr(fs, "source", None)
    if source is None:
        return None, "the feature list does not carry its source"
    from klineage.mechanisms.evidence import evidence
    ev = evidence(source, arch)
    if ev.compiled is None or not ev.compiled.ok:
        return None, f"no PTX: {ev.compiler_error or 'the source does not compile'}"
    return ev, ""


def _compiler_view(before, after, arch: str = DEFAULT_ARCH):
    """(evidence before, evidence after, why unavailable)."""
    eb, why_b = _evidence(before, arch)
    if eb is None:
        return None, None, why_b
    ea, why_a = _evidence(after, arch)
    if ea is None:
        return None, None, why_a
    return eb, ea, ""


def _presence(ev) -> dict:
    from klineage.mechanisms.evidence import presence
    return presence(ev)


def _pairs(keys) -> list[list[str]]:
    return [list(k) for k in sorted(keys)]


def _line_map(rich: str, simple: str) -> dict[int, int]:
    """Each line of the simpler kernel mapped to the richer kernel's line it stands for (a line diff;
    a line the rewrite put in counts at the place it was put)."""
    import difflib
    back: dict[int, int] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, rich.splitlines(), simple.splitlines(),
                                                       autojunk=False).get_opcodes():
        for j in range(j1, j2):
            back[j + 1] = i1 + (j - j1) + 1 if tag == "equal" else min(i1 + 1 + (j - j1), max(i2, i1 + 1))
    return back


def _base(locus: str) -> str:
    """A locus without the number that tells identical texts apart (`...#2`)."""
    return re.sub(r"#\d+$", "", locus)


def match_features(before: list[Feature], after: list[Feature]) -> tuple[set, set, list[list]]:
    """(keys only `before` has, keys only `after` has, [[before key, after key]] of the features that
    kept their identity under another name). A feature is itself across a step when its (mechanism,
    locus) is the same; a locus numbered among identical texts (`p + i#2`) is itself where the same
    text sits at the same place: its line in the simpler kernel maps (by a line diff) to its line in
    the richer one. So removing the first of three identical loads leaves the other two themselves,
    although the detector now numbers them #1 and #2."""
    b, a = _keys(before), _keys(after)
    if getattr(before, "source", None) is None or getattr(after, "source", None) is None:
        return b - a, a - b, []
    numbered = {(m, _base(loc)) for m, loc in b | a if loc != _base(loc)}
    grouped = lambda k: (k[0], _base(k[1])) in numbered  # noqa: E731
    gone = {k for k in b - a if not grouped(k)}
    came = {k for k in a - b if not grouped(k)}
    back = _line_map(before.source, after.source)
    at_b = {(f.mechanism, _base(f.locus), f.lines[0]): f.key for f in before if grouped(f.key)}
    at_a = {(f.mechanism, _base(f.locus), back.get(f.lines[0], f.lines[0])): f.key for f in after if grouped(f.key)}
    renamed = []
    for place in sorted(at_b.keys() & at_a.keys()):
        if at_b[place] != at_a[place]:
            renamed.append([list(at_b[place]), list(at_a[place])])
    left_b = {at_b[p] for p in at_b.keys() - at_a.keys()}
    left_a = {at_a[p] for p in at_a.keys() - at_b.keys()}
    both = left_b & left_a  # no place to tell them by (a line the step rewrote): the same name is the same
    return gone | (left_b - both), came | (left_a - both), renamed


def audit_rules(before: list[Feature], after: list[Feature], mechanism: str, locus: str,
                arch: str = DEFAULT_ARCH, loci: str = "identity") -> dict:
    """Whether a rules step removed exactly `mechanism` at `locus` and added nothing. With `loci` =
    "identity" a locus numbered among identical texts is matched by its place (match_features); with
    "occurrence" by its number alone, so removing the first of identical loci reads as the last one
    removed and is refused (a pipeline's [walk] rules_loci: klineage.lineage.mine)."""
    if loci == "occurrence":
        b, a = _keys(before), _keys(after)
        gone, came, renamed = b - a, a - b, []
    else:
        gone, came, renamed = match_features(before, after)
    removed, added = sorted(gone), sorted(came)
    ok = removed == [(mechanism, locus)] and not added
    why = "" if ok else (f"expected exactly {mechanism} at {locus} removed; removed {removed or 'nothing'}"
                         + (f", added {added}" if added else ""))
    out = {"ok": ok, "kind": "rules", "removed": [list(x) for x in removed], "added": [list(x) for x in added],
           "kept": len(_keys(before) & _keys(after)) + len(renamed), "reason": why}
    if renamed:
        out["renamed"] = renamed
    if not ok:
        return out  # the rest of the evidence can only add reasons to refuse
    eb, ea, unavailable = _compiler_view(before, after, arch)
    if eb is None:
        out["compiler_unavailable"] = unavailable
        return _seen_kept(out, before, after)
    span = next((f.lines for f in before if f.key == (mechanism, locus)), None)
    found = _compiled_changes(_presence(eb), _presence(ea), mechanism,
                              _at_change(eb, ea, span) if span is not None else None)
    if found:
        out.update(ok=False, compiler=found,
                   reason=f"{mechanism} at {locus} is removed in the source, but the generated code says otherwise: "
                          + "; ".join(f"{k.replace('_', ' ')} {v}" for k, v in found.items()))
        return out
    return _seen_kept(out, before, after)


def _seen_kept(out: dict, before, after) -> dict:
    """A rules step also keeps every form the source detectors see but no rule removes (a cooperative-
    groups reduce, a grid-stride loop, a hint in hand-written PTX): the same (mechanism, locus) before
    and after, or the step is refused naming what changed."""
    from klineage.mechanisms import detect_seen
    if getattr(before, "source", None) is None or getattr(after, "source", None) is None:
        return out
    from klineage.mechanisms import Features
    b = Features([f for f in detect_seen(before.source) if not f.removable], before.source)
    a = Features([f for f in detect_seen(after.source) if not f.removable], after.source)
    gone, came, _ = match_features(b, a)
    if not gone and not came:
        return out
    gone, came = sorted(gone), sorted(came)
    out.update(ok=False, seen_removed=_pairs(gone), seen_added=_pairs(came),
               reason="the step changes forms the detectors see but no rule removes: "
                      + ", ".join(filter(None, [f"removed {_pairs(gone)}" if gone else "",
                                                f"added {_pairs(came)}" if came else ""])))
    return out


def _at_change(eb, ea, span: tuple[int, int]):
    """A test of whether a family's compiler sites in one kernel all sit where the rewrite acted: within
    the removed feature's lines (the simpler kernel's lines are mapped back to the richer one's by a
    line diff; a line the rewrite put in counts at the place it was put). Unrolling a loop changes the
    code of its body; that is the step, not a change elsewhere."""
    back = _line_map(eb.compiled.k.source, ea.compiled.k.source)

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


def _specs():
    from klineage.mechanisms import family_specs
    return family_specs()


def companions_of(mechanism: str) -> frozenset[str]:
    """Mechanisms that enter a kernel with `mechanism` in one step by the granularity rules
    (Family.companions: a software pipeline is its asynchronous copies and the ring of stage buffers
    they fill, neither written without the other). A versions step declaring one may add the other."""
    fam = _specs().get(mechanism)
    return fam.companions if fam is not None else frozenset()


def covered_by(mechanism: str) -> set[str]:
    """Detectable families whose evidence covers a mechanism a ladder declares under another name
    (Family.covers)."""
    return {f.name for f in _specs().values() if mechanism in f.covers}


def replaced_by(mechanisms) -> set[str]:
    """Mechanisms the given ones take over when they enter a kernel (Family.replaces)."""
    specs = _specs()
    return {r for m in mechanisms if m in specs for r in specs[m].replaces}


def audit_version(before: list[Feature], after: list[Feature], mechanism: str, known: set[str],
                  arch: str = DEFAULT_ARCH) -> dict:
    """`before` = richer K_i, `after` = simpler K_{i-1}; `known` = mechanism names detectors find.
    Judged on the united evidence; the record is the source detectors' unless the compiler's evidence
    changes the verdict, and then names what it saw (`compiler`)."""
    source_only = _version_verdict(before, after, mechanism, known)
    eb, ea, unavailable = _compiler_view(before, after, arch)
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
    # a kind that a mechanism both kernels hold takes over (Family.replaces) is no new kind when it
    # appears: a register-path staging loop in a fallback kernel beside the asynchronous copies it
    # stands in for
    held = replaced_by(kinds_rich & kinds_simple)
    added_new = [a for a in added_forward if a == mechanism or a not in held]
    if mechanism in known:
        allowed = {mechanism} | companions_of(mechanism)
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


def audit_rederived(original: list[Feature], rederived: list[Feature], arch: str = DEFAULT_ARCH) -> dict:
    o, r = _keys(original), _keys(rederived)
    ok = o == r
    out = {"ok": ok, "missing": [list(x) for x in sorted(o - r)], "extra": [list(x) for x in sorted(r - o)],
           "reason": "" if ok else "the re-derived kernel does not have the original's features"}
    if not ok:
        return out
    eo, er, unavailable = _compiler_view(original, rederived, arch)
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
                     shape_before: set[str], shape_after: set[str], arch: str = DEFAULT_ARCH) -> dict:
    """A structural rewrite read forward (`before` -> `after`), audited as a ladder step is (by
    mechanism kinds: a structural rewrite moves and copies code, so the loci of the mechanisms it
    keeps move with it; audit_version), and by the shape recognisers' reading: `mechanism` is present
    after, nothing else they read appears and nothing goes."""
    v = audit_version(after, before, mechanism, known, arch)
    family = _specs().get(mechanism)
    written = frozenset(family.written_with if family is not None else ())
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


# ---------------------------------------------------------------------------- a ladder's step
def seen(fs: list[Feature], arch: str = DEFAULT_ARCH) -> tuple[list, str]:
    """What `klineage features` reads in the kernel a feature list came from: every form the source
    detectors see (rewritable and seen only) and the compiler's evidence, as Found records (the
    `Found.by` says which evidence); the given features alone (as source evidence) when the list carries
    no source. The second value says why the compiler's side is missing ("" when present)."""
    from klineage.mechanisms.evidence import SOURCE, Found, evidence
    source = getattr(fs, "source", None)
    if source is None:
        return [Found(f, SOURCE) for f in fs], "the feature list does not carry its source"
    ev = evidence(source, arch)
    why = "" if ev.compiled is not None and ev.compiled.ok else \
        f"no PTX: {ev.compiler_error or 'the source does not compile'}"
    return ev.found, why


def evidence_lines(found, family: str) -> str:
    """How the evidence sees one family in a kernel, as `klineage features` prints it: `source L12-14,
    compiler L88` (the lines of each feature, by which evidence), or `none`."""
    parts = []
    for f in found:
        if f.feature.mechanism != family:
            continue
        lines = f.feature.lines
        where = f"L{lines[0]}" + (f"-{lines[1]}" if lines[1] != lines[0] else "")
        parts.append(f"{f.by} {where}")
    return ", ".join(dict.fromkeys(parts)) or "none"


def audit_ladder_step(richer: list[Feature], simpler: list[Feature], declared: tuple[str, ...] | list[str],
                      detectable: set[str], arch: str = DEFAULT_ARCH) -> tuple[dict, tuple[str, ...]]:
    """(audit, the mechanisms the step adds) for a ladder step richer -> simpler whose spanned rungs
    declare `declared`; `detectable` = the names detectors find. Both kernels are read as `klineage
    features` reads them (seen): every source form and the compiler's evidence for `arch`.

    A step of one declared name whose evidence adds only it (and its companions) is the plain versions
    audit (audit_version). Otherwise the step is labelled with what the evidence says it adds: the
    kinds the richer kernel holds and the simpler does not (less the companions and covered forms of a
    declared name, and kinds a mechanism both hold takes over), the declared names the evidence sees
    added (their count grows), and the declared names no detector can see (structural). It is refused
    when forward it loses a kind (one that nothing it adds takes over), or when the evidence sees it add
    nothing and it declares nothing structural. A declared name the evidence does not see added refuses
    nothing: the step takes the evidence's label, and `disagrees` shows the declaration beside the
    evidence of both kernels, line by line."""
    declared = tuple(dict.fromkeys(declared))
    if len(declared) == 1:
        plain = audit_version(richer, simpler, declared[0], detectable, arch)
        if plain["ok"]:
            return plain, declared
    rich, why_r = seen(richer, arch)
    simple, why_s = seen(simpler, arch)
    rich_n = Counter(f.feature.mechanism for f in rich)
    simple_n = Counter(f.feature.mechanism for f in simple)
    added = sorted(set(rich_n) - set(simple_n))
    structural = [d for d in declared if d not in detectable]
    # a declared kind both kernels hold is added when the source forms of it grow in number (a second
    # warp reduction in another function); the compiler's per-kernel sites move with inlining
    rich_src = Counter(f.feature.mechanism for f in rich if f.by != "compiler")
    simple_src = Counter(f.feature.mechanism for f in simple if f.by != "compiler")

    def grows(d: str) -> bool:
        if d not in rich_n:
            return False
        return d not in simple_n or rich_src[d] > simple_src[d]
    unseen = [d for d in declared if d in detectable and not grows(d)]
    seen_added = [d for d in declared if d in detectable and grows(d)]
    absorbed = {c for d in declared for c in companions_of(d) | covered_by(d)}
    held = replaced_by(set(rich_n) & set(simple_n))
    undeclared = [a for a in added if a not in declared and a not in absorbed and a not in held]
    mechanisms = tuple(sorted(set(structural) | set(seen_added) | set(undeclared)))
    taken_over = replaced_by(set(mechanisms) | set(declared) | absorbed)
    lost = sorted(k for k in set(simple_n) - set(rich_n) if k not in taken_over)
    why = []
    if lost:
        why.append(f"forward the step loses {lost} (the simpler rung has them, the richer does not: "
                   + "; ".join(f"{k} in the simpler rung at {evidence_lines(simple, k)}" for k in lost) + ")")
    disagrees = ""
    if unseen:
        disagrees = (f"declared {unseen}, but the evidence does not see "
                     f"{'it' if len(unseen) == 1 else 'them'} added: "
                     + "; ".join(f"{d} in the richer rung at {evidence_lines(rich, d)}, in the simpler at "
                                 f"{evidence_lines(simple, d)}" for d in unseen)
                     + (f"; the evidence sees {list(mechanisms)} added" if mechanisms else ""))
    if not mechanisms:
        why.append((disagrees + "; " if disagrees else "")
                   + "the step adds nothing the evidence sees and declares no structural mechanism: declare what "
                     "it adds (// klineage-step: mechanism=NAME, or [steps] in versions/ladder.toml)")
    audit = {"ok": not why, "kind": "versions", "added_forward": added, "lost_forward": lost,
             "declared": list(declared), "mechanisms": list(mechanisms), "structural": structural,
             "undeclared": undeclared, "unseen": unseen, "reason": "; ".join(why)}
    if disagrees and mechanisms:
        audit["disagrees"] = disagrees
    if why_r or why_s:
        audit["compiler_unavailable"] = why_r or why_s
    return audit, mechanisms
