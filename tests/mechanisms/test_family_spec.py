"""Every family's spec is complete and agrees with its code, and a family added as one module (no edit
under klineage/) is picked up by detection, the rules walk's order, the static rules, retrieval and lift."""
from __future__ import annotations

import sys
import textwrap

import pytest
import tree_sitter as ts

from klineage.gate.compile import ARCHS
from klineage.mechanisms import Mechanism, detect_all, detect_seen, family_specs, order, registry, shapes
from klineage.mechanisms.base import BOTTLENECKS, FORWARD, Family
from klineage.mechanisms.static import HARDWARE, RULES, static_preconditions
from klineage.parse import syntax

SPECS = family_specs()
CATEGORIES = ("data_types", "layout", "storage", "pipeline", "hardware")


def _overrides(cls: type, method: str) -> bool:
    return any(method in c.__dict__ for c in cls.__mro__ if c is not Mechanism and c is not object)


def test_the_registry_is_the_families_in_rank_order():
    assert list(registry()) == list(SPECS)
    ranks = [f.rank for f in SPECS.values()]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
    assert all(f.mechanism.NAME == name for name, f in SPECS.items())


@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_spec_is_complete(name):
    fam: Family = SPECS[name]
    m = fam.mechanism
    assert fam.description.strip(), "a family says what it is (DESCRIPTION)"
    assert fam.addresses and fam.addresses <= set(BOTTLENECKS), "the bottleneck classes it relieves"
    assert set(fam.rules) <= {r.name for r in RULES} - {"hardware"}
    assert set(fam.hardware) <= {h[0] for h in HARDWARE}
    assert set(fam.scope) <= set(ARCHS)
    assert set(fam.forward) <= set(FORWARD)
    for cat, items in fam.preconditions.items():
        assert cat in CATEGORIES and items
        assert all(it["condition"].strip() and it["fails_without"].strip() for it in items)
    others = set(SPECS) - {name}
    assert {c for _, c in fam.conflicts} <= others and all(a for a, _ in fam.conflicts)
    assert set(fam.companions) | set(fam.replaces) | set(fam.written_with) <= others
    assert not set(fam.covers) & set(SPECS), "covers names what a ladder calls it, not another family"
    assert m.COMPILED_MATCH in ("lines", "function")
    if not m.DETECTABLE:  # only a ladder or an LLM names it
        assert not fam.forms and not fam.compiler and not fam.rewritable
        return
    assert fam.forms and all(f.text.strip() for f in fam.forms), "the source forms it recognises"
    # what the spec says agrees with the code
    assert fam.rewritable == _overrides(m, "deoptimize") == (not m.STRUCTURAL)
    assert any(not f.rewritable for f in fam.forms) == (_overrides(m, "detect_more") or m.STRUCTURAL)
    assert bool(fam.compiler) == _overrides(m, "compiled")
    assert ("reoptimize" in fam.forward) == _overrides(m, "reoptimize")
    assert ("shape" in fam.forward) == shapes.knows(name)
    if fam.rewritable:
        assert fam.anchor_query, "a rewritable family names the code it sits on"
    if fam.anchor_query:
        ts.Query(syntax.language(), fam.anchor_query.split(" ; ")[0])  # it compiles against tree-sitter-cuda


def test_the_rules_walk_order_is_the_rewritable_families():
    assert order() == tuple(n for n, f in SPECS.items() if f.rewritable)
    assert order()[:2] == ("cache_hint", "fast_math")  # a hint wraps the load a vector access makes


TOY = '''
"""A toy family for the test: a call of `toy_hint(x)` is the mechanism; removing it leaves `x`."""
from klineage.mechanisms.base import Applied, Family, Feature, Form, Mechanism, NotApplicable, detail
from klineage.parse.syntax import Edit, walk


class ToyHint(Mechanism):
    NAME = "toy_hint"
    DESCRIPTION = "a toy hint around a value"
    PRECONDITIONS = {"layout": [{"condition": "the toy holds", "fails_without": "nothing"}]}

    def _calls(self, k):
        return [n for n in walk(k.tree.root) if n.type == "call_expression"
                and k.tree.text_of(n.child_by_field_name("function")) == "toy_hint"]

    def detect(self, k):
        return [Feature(self.NAME, f"{k.function_of(n)}:{k.tree.text_of(n)}", k.lines(n), anchor="toy call",
                        detail=detail(calls=1)) for n in self._calls(k)]

    def deoptimize(self, k, feature):
        for n in self._calls(k):
            if f"{k.function_of(n)}:{k.tree.text_of(n)}" == feature.locus:
                arg = k.tree.text_of(n.child_by_field_name("arguments"))[1:-1]
                return Applied(k.tree.edit([Edit(n.start_byte, n.end_byte, arg)]), self.NAME, feature.locus,
                               k.tree.text_of(n), arg)
        return NotApplicable("no such call")


FAMILY = Family(ToyHint, rank=15, forms=(Form("a call of toy_hint(x)"),), anchor_query="(call_expression) @call",
                addresses=frozenset({"compute"}), rules=("restrict",))
'''

TOY_DECLARED = '''
[toy_declared]
description = "a toy family only a ladder names"
addresses = ["latency"]
rules = ["shared_memory"]

[[toy_declared.preconditions.pipeline]]
condition = "the toy pipeline runs"
fails_without = "a toy deadlock"
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A folder on the families package's path holding one more family module and a declared.toml."""
    import klineage.mechanisms.families as pkg
    (tmp_path / "toy_hint.py").write_text(TOY)
    (tmp_path / "declared.toml").write_text(TOY_DECLARED)
    monkeypatch.setattr(pkg, "__path__", [*pkg.__path__, str(tmp_path)])
    yield
    sys.modules.pop("klineage.mechanisms.families.toy_hint", None)


def test_a_family_added_as_one_module_is_picked_up_everywhere(toy):
    from klineage.apply.retrieve import addresses
    from klineage.lineage.lift import _anchor_query
    from klineage.lineage.proposers import RulesProposer
    specs = family_specs()
    assert "toy_hint" in registry() and "toy_declared" in registry()
    assert list(specs).index("toy_hint") == 1  # rank 15: after cache_hint, before fast_math
    assert order()[:3] == ("cache_hint", "toy_hint", "fast_math")
    src = textwrap.dedent("""\
        __device__ float toy_hint(float x) { return x; }
        __global__ void k(float *__restrict__ y, const float *__restrict__ x) {
            y[threadIdx.x] = toy_hint(x[threadIdx.x]) * 2.0f;  // toy family test kernel
        }
        """)
    feats = detect_all(src)
    toy_feat = next(f for f in feats if f.mechanism == "toy_hint")
    assert toy_feat in detect_seen(src)
    # the rules walk proposes it, in its rank
    props = [p for p in RulesProposer().propose(src, feats, set()) if not isinstance(p, tuple)]
    assert [p.mechanism for p in props][:1] == ["toy_hint"] and "toy_hint(" not in props[0].source.split("}", 1)[1]
    # its static rules (restrict) run for it, and only those
    pre = static_preconditions(src, "toy_hint", toy_feat.to_dict())
    assert pre and all("restrict" in p["condition"] or "alias" in p["condition"] for p in pre)
    # retrieval's bottleneck term and lift's anchor read the spec
    assert addresses("toy_hint") == {"compute"} and addresses("toy_declared") == {"latency"}
    assert _anchor_query(specs["toy_hint"]) == "(call_expression) @call"
    declared = registry()["toy_declared"]
    assert declared.DETECTABLE is False and declared.PRECONDITIONS["pipeline"][0]["condition"] == "the toy pipeline runs"


def test_a_family_module_without_a_spec_is_an_error(tmp_path, monkeypatch):
    import klineage.mechanisms.families as pkg
    (tmp_path / "half_done.py").write_text("X = 1\n")
    monkeypatch.setattr(pkg, "__path__", [*pkg.__path__, str(tmp_path)])
    try:
        with pytest.raises(RuntimeError, match="declares no FAMILY"):
            family_specs()
    finally:
        sys.modules.pop("klineage.mechanisms.families.half_done", None)
