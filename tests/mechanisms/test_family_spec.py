"""Every family's spec is complete and agrees with its code, and a family added as one module (no edit
under klineage/) is picked up by detection, the rules walk's order, the static rules, retrieval and lift."""
from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

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


def test_only_the_tensor_core_and_pipeline_families_relieve_no_bottleneck_class():
    """They declare none (Family.addresses says why); every other family names what it relieves."""
    assert {n for n, f in SPECS.items() if not f.addresses} == {
        "async_copy", "multistage_buffer", "smem_swizzle", "tma", "register_tiling", "tensor_core_mma",
        "warp_specialization", "wgmma"}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_spec_is_complete(name):
    _complete(SPECS[name])


def _complete(fam: Family) -> None:
    name, m = fam.name, fam.mechanism
    assert fam.description.strip(), "a family says what it is (DESCRIPTION)"
    assert fam.addresses <= set(BOTTLENECKS), "the bottleneck classes it relieves"
    assert set(fam.rules) <= {r.name for r in RULES} - {"hardware"}
    assert set(fam.hardware) <= {h[0] for h in HARDWARE}
    assert set(fam.scope) <= set(ARCHS)
    assert set(fam.forward) <= set(FORWARD)
    for cat, items in fam.preconditions.items():
        assert cat in CATEGORIES and items
        assert all(it["condition"].strip() and it["fails_without"].strip() for it in items)
    others = set(family_specs()) - {name}
    assert {c for _, c in fam.conflicts} <= others and all(a for a, _ in fam.conflicts)
    assert set(fam.companions) | set(fam.replaces) | set(fam.written_with) <= others
    assert not set(fam.covers) & set(family_specs()), "covers names what a ladder calls it, not another family"
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


DOC = Path(__file__).resolve().parents[2] / "docs" / "adding-a-family.md"


def doc_family() -> str:
    """The example family module of docs/adding-a-family.md, as the page shows it."""
    m = re.search(r"^```python file=klineage/mechanisms/families/assume_aligned\.py\n(.*?)^```", DOC.read_text(),
                  re.S | re.M)
    assert m, "docs/adding-a-family.md shows the example family module"
    return m.group(1)


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
    (tmp_path / "assume_aligned.py").write_text(doc_family())
    (tmp_path / "declared.toml").write_text(TOY_DECLARED)
    monkeypatch.setattr(pkg, "__path__", [*pkg.__path__, str(tmp_path)])
    yield
    sys.modules.pop("klineage.mechanisms.families.assume_aligned", None)


def test_the_family_of_the_adding_a_family_page_is_picked_up_everywhere(toy):
    """The page's example module dropped on the families path (and a declared.toml beside it): no
    edit under klineage/."""
    from klineage.apply.retrieve import addresses
    from klineage.lineage.lift import _anchor_query
    from klineage.lineage.proposers import RulesProposer
    specs = family_specs()
    assert "assume_aligned" in registry() and "toy_declared" in registry()
    assert list(specs).index("assume_aligned") == 1  # rank 15: after cache_hint, before fast_math
    assert order()[:3] == ("cache_hint", "assume_aligned", "fast_math")
    fam = specs["assume_aligned"]
    _complete(fam)
    src = textwrap.dedent("""\
        __global__ void k(float *__restrict__ y, const float *__restrict__ x, int n) {
            const float4 *x4 = (const float4 *)__builtin_assume_aligned(x, 16);
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n / 4) y[i] = x4[i].x;  // the example family's test kernel
        }
        """)
    feats = detect_all(src)
    mine = next(f for f in feats if f.mechanism == "assume_aligned")
    assert mine.locus == "k:x" and mine in detect_seen(src)
    # the rules walk proposes it in its rank, and its reoptimize puts it back
    props = [p for p in RulesProposer().propose(src, feats, set()) if not isinstance(p, tuple)]
    assert props[0].mechanism == "assume_aligned" and "__builtin_assume_aligned" not in props[0].source
    assert RulesProposer().rederive(props[0]) == src
    # its static rules (vector_cast) run for it, and only those
    pre = static_preconditions(src, "assume_aligned", mine.to_dict())
    assert pre and all(p["category"] in ("data_types", "layout") for p in pre)
    assert static_preconditions(src, "assume_aligned", mine.to_dict()) != static_preconditions(src, "restrict")
    # retrieval's bottleneck term and lift's anchor read the spec
    assert addresses("assume_aligned") == {"memory"} and addresses("toy_declared") == {"latency"}
    assert _anchor_query(fam) == fam.anchor_query
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
