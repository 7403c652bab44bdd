"""The audit's verdicts on feature lists, with the compiler's evidence given as data (no nvcc): fast,
so the mutation run of klineage.mechanisms.audit runs these on every mutant (benchmarks/mutation.py).
The same rules on real kernels compiled to PTX: tests/lineage/test_audit.py, test_audit_evidence.py."""
from types import SimpleNamespace as NS

import pytest

from klineage.mechanisms import audit as A
from klineage.mechanisms import Features
from klineage.mechanisms.base import Feature

KNOWN = {"restrict", "unroll", "vector_access", "async_copy", "multistage_buffer", "smem_staging", "cache_hint",
         "warp_reduction"}


def f(mech: str, locus: str = "k:x", lines=(1, 1)) -> Feature:
    return Feature(mech, locus, tuple(lines))


# ---------------------------------------------------------------- the compiler's evidence, as data

class Ev:
    """What klineage.mechanisms.evidence.evidence gives: `found` (feature, sites, by), `compiled`."""

    def __init__(self, source: str, found=(), ok=True, error=None):
        self.compiled = NS(ok=ok, k=NS(source=source)) if ok is not None else None
        self.compiler_error = error
        self.found = list(found)


def found(mech: str, kernel: str = "k", lines=(1,), by="source", locus="k:x"):
    return NS(feature=f(mech, locus), sites=[NS(kernel=kernel, lines=list(lines))] if kernel else [], by=by)


@pytest.fixture
def compiler(monkeypatch):
    """Install evidence for sources: {source: (Ev, presence dict)}."""
    table: dict = {}
    import klineage.mechanisms.evidence as evmod
    monkeypatch.setattr(evmod, "evidence", lambda src, arch=None: table[src][0])
    monkeypatch.setattr(evmod, "presence", lambda ev: next(p for e, p in table.values() if e is ev))
    return table


def src(name: str, *feats: Feature) -> Features:
    return Features(list(feats), source=name)


# ---------------------------------------------------------------- rules steps

def test_a_rules_step_removes_exactly_the_declared_feature():
    before, after = [f("restrict", "k:params"), f("unroll", "k:loop")], [f("unroll", "k:loop")]
    out = A.audit_rules(before, after, "restrict", "k:params")
    assert out["ok"] and out["kind"] == "rules" and out["removed"] == [["restrict", "k:params"]]
    assert out["added"] == [] and out["kept"] == 1 and out["reason"] == ""
    assert out["compiler_unavailable"] == "the feature list does not carry its source"


@pytest.mark.parametrize("after, removed, added", [
    ([f("unroll", "k:loop"), f("restrict", "k:params")], "nothing", None),
    ([], "[('restrict', 'k:params'), ('unroll', 'k:loop')]", None),
    ([f("unroll", "k:loop"), f("cache_hint", "k:ldg")], "[('restrict', 'k:params')]", "[('cache_hint', 'k:ldg')]"),
])
def test_a_rules_step_that_removes_more_or_less_or_adds_is_refused(after, removed, added):
    before = [f("restrict", "k:params"), f("unroll", "k:loop")]
    out = A.audit_rules(before, after, "restrict", "k:params")
    assert not out["ok"] and "compiler_unavailable" not in out
    want = f"expected exactly restrict at k:params removed; removed {removed}" + (f", added {added}" if added else "")
    assert out["reason"] == want
    assert out["kept"] == len({x.key for x in before} & {x.key for x in after})


def test_the_wrong_locus_of_the_right_mechanism_is_refused():
    before = [f("unroll", "k:a"), f("unroll", "k:b")]
    assert not A.audit_rules(before, [f("unroll", "k:a")], "unroll", "k:a")["ok"]
    assert A.audit_rules(before, [f("unroll", "k:a")], "unroll", "k:b")["ok"]


def test_a_rules_step_whose_code_says_otherwise_is_refused(compiler):
    """The source loses `restrict`, the compiler sees a vector access leave the kernel too."""
    rich = "rich\nline2\nline3\n"
    simple = "simple\nline2\nline3\n"
    compiler[rich] = (Ev(rich, [found("vector_access", lines=(3,))]), {("restrict", "k"): (True, False),
                                                                       ("vector_access", "k"): (False, True)})
    compiler[simple] = (Ev(simple), {})
    before = src(rich, f("restrict", "k:params", (1, 1)))
    out = A.audit_rules(before, src(simple), "restrict", "k:params")
    assert not out["ok"] and out["compiler"] == {"removed": [["vector_access", "k"]]}
    assert out["reason"] == ("restrict at k:params is removed in the source, but the generated code says otherwise: "
                             "removed [['vector_access', 'k']]")
    # the same change where the rewrite acted (its site inside the removed feature's lines) is the step
    compiler[rich] = (Ev(rich, [found("vector_access", lines=(1,))]), compiler[rich][1])
    assert A.audit_rules(src(rich, f("restrict", "k:params", (1, 1))), src(simple), "restrict", "k:params")["ok"]


def test_a_rules_step_without_ptx_is_audited_on_the_source(compiler):
    compiler["a"] = (Ev("a", ok=False, error="nvcc failed"), {})
    compiler["b"] = (Ev("b"), {})
    out = A.audit_rules(src("a", f("restrict")), src("b"), "restrict", "k:x")
    assert out["ok"] and out["compiler_unavailable"] == "no PTX: nvcc failed"
    compiler["a"] = (Ev("a", ok=None), {})
    assert A.audit_rules(src("a", f("restrict")), src("b"), "restrict", "k:x")["compiler_unavailable"] == \
        "no PTX: the source does not compile"
    compiler["a"] = (Ev("a"), {})
    compiler["b"] = (Ev("b", ok=False), {})
    assert A.audit_rules(src("a", f("restrict")), src("b"), "restrict", "k:x")["compiler_unavailable"] == \
        "no PTX: the source does not compile"


# ---------------------------------------------------------------- what the compiler saw change

P = lambda **kw: {(k.split("__")[0], k.split("__")[1]): v for k, v in kw.items()}  # noqa: E731


@pytest.mark.parametrize("pb, pa, want", [
    (P(restrict__k=(True, False)), {}, {}),                                     # the removed one: the step
    (P(unroll__k=(True, False)), {}, {"removed": [["unroll", "k"]]}),          # another family leaves
    (P(unroll__k=(False, True)), {}, {"removed": [["unroll", "k"]]}),          # compiler-only, leaves
    ({}, P(unroll__k=(True, False)), {"added": [["unroll", "k"]]}),            # enters
    ({}, P(restrict__k=(False, True)), {"added": [["restrict", "k"]]}),         # even the removed one
    (P(unroll__k=(True, True)), P(unroll__k=(True, False)), {"no_longer_compiled": [["unroll", "k"]]}),
    (P(unroll__k=(True, False)), P(unroll__k=(True, True)), {"newly_compiled": [["unroll", "k"]]}),
    (P(restrict__k=(True, True)), P(restrict__k=(False, True)), {"still_compiled": [["restrict", "k"]]}),
    (P(restrict__k=(True, True)), P(restrict__k=(False, False)), {}),
    (P(unroll__k=(False, True)), P(unroll__k=(False, False)), {"removed": [["unroll", "k"]]}),
    (P(unroll__k=(False, False)), P(unroll__k=(False, True)), {"added": [["unroll", "k"]]}),
    (P(restrict__k=(False, True)), P(restrict__k=(False, False)), {}),          # compiler-only, the removed one
    (P(unroll__k=(True, True)), P(unroll__k=(True, True)), {}),
    (P(unroll__k=(False, False)), P(unroll__k=(False, False)), {}),
])
def test_compiled_changes_by_family_and_kernel(pb, pa, want):
    assert A._compiled_changes(pb, pa, "restrict") == want


def test_a_change_where_the_rewrite_acted_is_not_counted():
    pb, pa = P(unroll__k=(True, True), cache_hint__k=(True, True)), P(unroll__k=(True, False))
    here = lambda key, side: key[0] == "unroll"  # noqa: E731
    assert A._compiled_changes(pb, pa, "restrict", here) == {"removed": [["cache_hint", "k"]]}
    seen = []
    A._compiled_changes(P(unroll__k=(True, True)), P(unroll__k=(True, False)), "restrict",
                        lambda key, side: seen.append((key, side)) or False)
    assert seen == [(("unroll", "k"), "before")]
    seen.clear()
    A._compiled_changes(P(unroll__k=(True, False)), P(unroll__k=(True, True)), "restrict",
                        lambda key, side: seen.append((key, side)) or False)
    assert seen == [(("unroll", "k"), "after")]
    seen.clear()
    A._compiled_changes({}, P(unroll__k=(True, False)), "restrict", lambda key, side: seen.append((key, side)) or False)
    assert seen == [(("unroll", "k"), "after")]
    seen.clear()
    A._compiled_changes(P(unroll__k=(False, False)), P(unroll__k=(False, True)), "restrict",
                        lambda key, side: seen.append((key, side)) or False)
    assert seen == [(("unroll", "k"), "after")]
    seen.clear()
    A._compiled_changes(P(unroll__k=(False, True)), P(unroll__k=(False, False)), "restrict",
                        lambda key, side: seen.append((key, side)) or False)
    assert seen == [(("unroll", "k"), "before")]


def test_where_the_rewrite_acted_maps_the_simpler_kernels_lines_back():
    rich = "a\nb\nc\nd\ne\n"
    simple = "a\nX\nc\nd\ne\n"  # line 2 replaced
    eb = NS(compiled=NS(k=NS(source=rich)), found=[found("unroll", lines=(2,)), found("cache_hint", lines=(4,))])
    ea = NS(compiled=NS(k=NS(source=simple)), found=[found("unroll", lines=(2,)), found("cache_hint", lines=(5,)),
                                                     found("vector_access", lines=(3,))])
    here = A._at_change(eb, ea, (2, 3))
    assert here(("unroll", "k"), "before") and here(("unroll", "k"), "after")
    assert not here(("cache_hint", "k"), "before") and not here(("cache_hint", "k"), "after")
    assert here(("vector_access", "k"), "after") and not here(("vector_access", "k"), "before")  # no sites: False
    assert not here(("unroll", "other"), "before")
    assert here(("unroll", "k"), "before") == A._at_change(eb, ea, (2, 2))(("unroll", "k"), "before")
    assert not A._at_change(eb, ea, (3, 3))(("unroll", "k"), "before")
    # a site with a line inside and one outside the span: not all where the rewrite acted
    eb2 = NS(compiled=eb.compiled, found=[found("unroll", lines=(2,)), found("unroll", lines=(5,))])
    assert not A._at_change(eb2, ea, (2, 3))(("unroll", "k"), "before")
    # a line the rewrite inserted counts at the place it was put
    inserted = NS(compiled=NS(k=NS(source="a\nb\nNEW\nc\nd\ne\n")), found=[found("unroll", lines=(3,))])
    assert A._at_change(eb, inserted, (2, 3))(("unroll", "k"), "after")
    assert not A._at_change(eb, inserted, (4, 5))(("unroll", "k"), "after")
    tail = NS(compiled=NS(k=NS(source="a\nb\nc\nd\ne\nN1\nN2\n")), found=[found("unroll", lines=(7,))])
    assert A._at_change(eb, tail, (5, 6))(("unroll", "k"), "after")


# ---------------------------------------------------------------- versions steps

def V(before, after, mech, known=KNOWN):
    return A._version_verdict(before, after, mech, known)


def test_a_version_step_adds_its_mechanism_and_keeps_the_rest():
    rich, simple = [f("restrict"), f("unroll")], [f("restrict")]
    out = V(rich, simple, "unroll")
    assert out == {"ok": True, "kind": "versions", "added_forward": ["unroll"], "lost_forward": [],
                   "declared": "unroll", "detected": True, "reason": ""}


def test_a_version_step_that_adds_another_or_loses_one_is_refused():
    out = V([f("unroll"), f("cache_hint")], [], "unroll")
    assert not out["ok"] and out["reason"] == "only unroll added; forward the step adds ['cache_hint', 'unroll']"
    out = V([f("unroll")], [f("restrict")], "unroll")
    assert not out["ok"] and out["lost_forward"] == ["restrict"]
    assert out["reason"] == "only unroll added; forward the step adds ['unroll'] and loses ['restrict']"
    out = V([f("restrict")], [f("restrict")], "unroll")
    assert not out["ok"] and out["reason"] == "only unroll added; forward the step adds nothing"


def test_a_second_feature_of_a_kind_already_there_is_the_step():
    rich = [f("unroll", "k:a"), f("unroll", "k:b")]
    out = V(rich, [f("unroll", "k:a")], "unroll")
    assert out["ok"] and out["added_forward"] == ["unroll"]
    assert not V([f("unroll", "k:a")], [f("unroll", "k:a")], "unroll")["ok"]
    assert not V([f("unroll", "k:a")], [f("unroll", "k:a"), f("unroll", "k:b")], "unroll")["ok"]


def test_companions_and_what_a_mechanism_takes_over():
    out = V([f("async_copy"), f("multistage_buffer")], [], "async_copy")
    assert out["ok"] and "with its companions ['multistage_buffer']" not in out["reason"]
    out = V([f("async_copy"), f("multistage_buffer"), f("unroll")], [], "async_copy")
    assert not out["ok"] and out["reason"].startswith(
        "only async_copy added (with its companions ['multistage_buffer']), nothing lost but ['smem_staging'], "
        "which it takes over; forward the step adds")
    # asynchronous copies take over the register path of staging: losing it is the step
    assert V([f("async_copy")], [f("smem_staging")], "async_copy")["ok"]
    assert not V([f("unroll")], [f("smem_staging")], "unroll")["ok"]
    # a staging loop that appears beside copies both kernels hold is no new kind
    assert V([f("async_copy"), f("smem_staging"), f("unroll")], [f("async_copy")], "unroll")["ok"]
    assert not V([f("unroll"), f("smem_staging")], [], "unroll")["ok"]


def test_a_covered_or_undetected_mechanism():
    out = V([f("smem_staging")], [], "smem_tiling")
    assert out["ok"] and not out["detected"]
    out = V([f("smem_staging"), f("unroll")], [], "smem_tiling")
    assert not out["ok"] and out["reason"].startswith(
        "no mechanism added other than ['smem_staging'], which covers smem_tiling; forward the step adds")
    assert not V([f("smem_staging")], [f("restrict")], "smem_tiling")["ok"]
    out = V([f("restrict")], [f("restrict")], "warp_per_row")
    assert out["ok"] and out["added_forward"] == []
    out = V([f("restrict"), f("unroll")], [f("restrict")], "warp_per_row")
    assert not out["ok"] and out["reason"] == ("no detected mechanism added (warp_per_row is structural, not seen by "
                                               "detectors); forward the step adds ['unroll']")
    assert not V([f("restrict")], [f("restrict"), f("unroll")], "warp_per_row")["ok"]
    assert A.covered_by("smem_tiling") == {"smem_staging"} and A.covered_by("unroll") == set()
    assert A.replaced_by(["async_copy", "unroll", "nope"]) == {"smem_staging"}


def test_the_compiler_decides_a_version_step_the_source_reads_otherwise(compiler):
    compiler["rich"] = (Ev("rich", [found("unroll", by="source"), found("vector_access", by="compiler")]), {})
    compiler["simple"] = (Ev("simple", []), {})
    rich, simple = src("rich", f("unroll")), src("simple")
    out = A.audit_version(rich, simple, "unroll", KNOWN)
    assert not out["ok"] and out["compiler"] == {"added": ["vector_access"]}
    assert out["added_forward"] == ["unroll", "vector_access"]
    # the same verdict either way: the source detectors' record, no compiler entry
    compiler["rich"] = (Ev("rich", [found("unroll")]), {})
    out = A.audit_version(rich, simple, "unroll", KNOWN)
    assert out["ok"] and "compiler" not in out and "compiler_unavailable" not in out
    out = A.audit_version([f("unroll")], [], "unroll", KNOWN)
    assert out["ok"] and out["compiler_unavailable"] == "the feature list does not carry its source"


def test_what_the_compiler_changed_against_the_source():
    before, after = [f("unroll")], [f("restrict")]
    eb = NS(found=[found("unroll"), found("cache_hint")])
    ea = NS(found=[found("cache_hint"), found("vector_access")])
    assert A._compiler_decided(before, after, eb, ea) == {"lost": ["vector_access"], "not_lost": ["restrict"]}
    eb = NS(found=[found("restrict"), found("warp_reduction")])
    ea = NS(found=[found("restrict")])
    assert A._compiler_decided([f("unroll")], [], eb, ea) == {"added": ["warp_reduction"], "not_added": ["unroll"]}
    assert A._compiler_decided([], [], NS(found=[]), NS(found=[])) == {}


# ---------------------------------------------------------------- forward re-derivation

def test_a_rederivation_has_exactly_the_originals_features():
    orig = [f("restrict", "k:p"), f("unroll", "k:l")]
    out = A.audit_rederived(orig, list(reversed(orig)))
    assert out["ok"] and out["missing"] == [] and out["extra"] == [] and out["reason"] == ""
    assert out["compiler_unavailable"] == "the feature list does not carry its source"
    out = A.audit_rederived(orig, [f("restrict", "k:p"), f("unroll", "k:other")])
    assert not out["ok"] and out["missing"] == [["unroll", "k:l"]] and out["extra"] == [["unroll", "k:other"]]
    assert out["reason"] == "the re-derived kernel does not have the original's features"
    assert "compiler_unavailable" not in out


def test_a_rederivation_that_compiles_to_other_mechanisms_is_refused(compiler):
    compiler["o"] = (Ev("o"), {("unroll", "k"): (True, True), ("restrict", "k"): (True, False)})
    compiler["r"] = (Ev("r"), {("unroll", "k"): (True, False), ("restrict", "k"): (True, False)})
    out = A.audit_rederived(src("o", f("unroll")), src("r", f("unroll")))
    assert not out["ok"] and out["compiler"] == {"compiled_differently": [["unroll", "k"]]}
    assert out["reason"] == "the re-derived kernel compiles to different mechanisms than the original: [['unroll', 'k']]"
    compiler["r"] = (Ev("r"), {("unroll", "k"): (False, True)})  # source presence may differ, the code not
    out = A.audit_rederived(src("o", f("unroll")), src("r", f("unroll")))
    assert out["ok"] and "compiler" not in out and "compiler_unavailable" not in out
    compiler["r"] = (Ev("r"), {("unroll", "k"): (True, True), ("cache_hint", "k"): (False, True)})
    assert A.audit_rederived(src("o", f("unroll")), src("r", f("unroll")))["compiler"] == \
        {"compiled_differently": [["cache_hint", "k"]]}


# ---------------------------------------------------------------- structural rewrites

def test_a_structural_rewrite_adds_its_shape_and_nothing_else():
    out = A.audit_structural([f("restrict")], [f("restrict")], "warp_per_row", KNOWN, set(), {"warp_per_row"})
    assert out["ok"] and out["kind"] == "structural" and out["shape_added"] == ["warp_per_row"]
    assert out["shape_lost"] == [] and out["reason"] == ""
    out = A.audit_structural([f("restrict")], [f("restrict")], "warp_per_row", KNOWN, {"block_per_row"},
                             {"warp_per_row"})
    assert not out["ok"] and out["shape_lost"] == ["block_per_row"]
    assert out["reason"] == ("the shape recogniser reads ['warp_per_row'] added and ['block_per_row'] gone "
                             "(expected warp_per_row added)")
    out = A.audit_structural([f("restrict")], [f("restrict")], "warp_per_row", KNOWN, set(), set())
    assert not out["ok"] and out["reason"] == "the shape recogniser reads nothing added (expected warp_per_row added)"
    out = A.audit_structural([f("restrict")], [f("restrict")], "warp_per_row", KNOWN, set(),
                             {"warp_per_row", "block_per_row"})
    assert not out["ok"]
    out = A.audit_structural([f("restrict")], [], "warp_per_row", KNOWN, set(), {"warp_per_row"})
    assert not out["ok"] and out["reason"] == ("no detected mechanism added (warp_per_row is structural, not seen by "
                                               "detectors); forward the step adds nothing and loses ['restrict']")
    out = A.audit_structural([f("restrict")], [], "warp_per_row", KNOWN, set(), set())
    assert out["reason"].endswith("; the shape recogniser reads nothing added (expected warp_per_row added)")


def test_a_structural_rewrite_may_write_its_companions():
    # register_cache is written with a per-thread count (its Family's written_with)
    out = A.audit_structural([], [f("coarsening")], "register_cache", KNOWN, set(), {"register_cache"})
    assert out["ok"] and out["companions"] == ["coarsening"] and out["reason"] == ""
    out = A.audit_structural([], [f("coarsening"), f("unroll")], "register_cache", KNOWN, set(), {"register_cache"})
    assert not out["ok"] and "companions" not in out
    out = A.audit_structural([f("restrict")], [f("coarsening")], "register_cache", KNOWN, set(), {"register_cache"})
    assert not out["ok"]
    out = A.audit_structural([], [f("unroll")], "warp_per_row", KNOWN, set(), {"warp_per_row"})
    assert not out["ok"]


# ---------------------------------------------------------------- the edges the mutation run found

def test_a_refusal_is_false_not_merely_falsy_and_names_each_change(compiler):
    rich, simple = "r\n", "s\n"
    compiler[rich] = (Ev(rich), {("restrict", "k"): (True, False), ("vector_access", "k"): (False, True),
                                 ("warp_reduction", "k"): (True, True)})
    compiler[simple] = (Ev(simple), {("warp_reduction", "k"): (True, False)})
    out = A.audit_rules(src(rich, f("restrict", "k:params", (1, 1))), src(simple), "restrict", "k:params")
    assert out["ok"] is False
    assert out["reason"].endswith("otherwise: removed [['vector_access', 'k']]; "
                                  "no longer compiled [['warp_reduction', 'k']]")
    compiler["o"] = (Ev("o"), {("unroll", "k"): (True, True)})
    compiler["r2"] = (Ev("r2"), {("unroll", "k"): (True, False)})
    assert A.audit_rederived(src("o", f("unroll")), src("r2", f("unroll")))["ok"] is False


def _lines(n: int, insert_at: int | None = None) -> str:
    out = ["}"] * n
    if insert_at is not None:
        out.insert(insert_at - 1, "NEW")
    return "\n".join(out) + "\n"


def _here(rich: str, simple: str, span, before_lines=(), after_lines=()):
    eb = NS(compiled=NS(k=NS(source=rich)), found=[found("unroll", lines=(n,)) for n in before_lines])
    ea = NS(compiled=NS(k=NS(source=simple)), found=[found("unroll", lines=(n,)) for n in after_lines])
    return A._at_change(eb, ea, span)


def test_lines_map_back_across_a_long_kernel_with_repeated_lines():
    """300 lines of `}` (a line difflib would treat as junk by default, matching nothing), one line
    inserted at 151: the simpler kernel's lines after it map back one line up, those before it to
    themselves, the inserted one to where it was put."""
    rich, simple = _lines(300), _lines(300, insert_at=151)
    assert _here(rich, simple, (199, 199), after_lines=(200,))(("unroll", "k"), "after")
    assert not _here(rich, simple, (200, 200), after_lines=(200,))(("unroll", "k"), "after")
    assert _here(rich, simple, (100, 100), after_lines=(100,))(("unroll", "k"), "after")
    assert _here(rich, simple, (151, 151), after_lines=(151,))(("unroll", "k"), "after")
    assert not _here(rich, simple, (150, 150), after_lines=(151,))(("unroll", "k"), "after")
    # the richer kernel's own lines are not mapped
    assert _here(rich, simple, (200, 200), before_lines=(200,))(("unroll", "k"), "before")
    # a line past the simpler kernel's end stays itself
    assert not _here(rich, simple, (1, 400), after_lines=(999,))(("unroll", "k"), "after")
    assert _here(rich, simple, (1, 999), after_lines=(999,))(("unroll", "k"), "after")


def test_lines_of_a_replaced_block_map_to_the_block():
    rich = "a\nb\nc\nd\ne\n"
    simple = "a\nB1\nB2\nB3\nB4\ne\n"  # rich lines 2-4 replaced by four lines
    for line, back in ((2, 2), (3, 3), (4, 4), (5, 4), (6, 5)):
        assert _here(rich, simple, (back, back), after_lines=(line,))(("unroll", "k"), "after"), line
        assert not _here(rich, simple, (back + 1, back + 1), after_lines=(line,))(("unroll", "k"), "after"), line


def test_the_change_on_the_other_side_is_not_where_the_rewrite_acted():
    """A compiler-only family that appears: its change is the rewrite's only where its new sites are."""
    after_only = lambda key, side: side == "after"  # noqa: E731
    before_only = lambda key, side: side == "before"  # noqa: E731
    assert A._compiled_changes(P(unroll__k=(False, False)), P(unroll__k=(False, True)), "restrict", after_only) == {}
    assert A._compiled_changes(P(unroll__k=(False, True)), P(unroll__k=(False, False)), "restrict", before_only) == {}
    assert A._compiled_changes(P(unroll__k=(True, False)), P(unroll__k=(False, True)), "restrict") == {}
    assert A._compiled_changes(P(unroll__k=(False, True)), P(unroll__k=(True, False)), "restrict") == {}


def test_a_kind_only_one_kernel_holds_takes_nothing_over():
    """Asynchronous copies take over staging only where both kernels hold them."""
    assert not V([f("async_copy"), f("smem_staging")], [], "async_copy")["ok"]


def test_a_structural_rewrite_of_a_mechanism_no_family_declares(monkeypatch):
    out = A.audit_structural([], [], "no_such_shape", KNOWN, set(), {"no_such_shape"})
    assert out["ok"] and "companions" not in out
    # companions are what the family writes with, never the mechanism itself
    import dataclasses
    from klineage.mechanisms import family_specs
    specs = dict(family_specs())
    specs["unroll"] = dataclasses.replace(specs["unroll"], written_with=("restrict",))
    monkeypatch.setattr(A, "_specs", lambda: specs)
    out = A.audit_structural([], [f("unroll"), f("restrict")], "unroll", KNOWN, set(), {"unroll"})
    assert out["ok"] and out["companions"] == ["restrict"]
