"""The package's rooms, read from its source with `ast` (nothing is imported).

Every `import` / `from ... import` in a module counts, at module level and inside functions alike (a
deferred import is still a dependency; only imports under `if TYPE_CHECKING:` are left out). An
import names the most specific module of the package it reaches: `from klineage.parse import syntax`
depends on klineage.parse.syntax, `from klineage.mechanisms import registry` on the package
klineage.mechanisms (its __init__).

Rooms (../shared/DESIGN.md): only klineage/parse/ imports tree-sitter or libclang; only
klineage/store/ imports DuckDB; only klineage/llm/ imports an LLM SDK or its HTTP client; only
klineage/gate/compile.py runs nvcc; only klineage/gate/worker.py touches the GPU (torch.cuda,
ctypes); lineage and the llm room never import apply, and the llm room imports no stage above it.

Circles: the module graph has no cycle (no strongly connected component of two or more modules),
except those listed in KNOWN_CIRCLES.

Families: a mechanism family is known in klineage/mechanisms/ only (its Family spec). Outside it no
string literal is a family's name, except the few in FAMILY_LITERALS, each with its reason: lineage,
apply, heldout and the rest read what they need of a family from its spec, so a family added is
picked up everywhere and none is forgotten in a table.
"""
from __future__ import annotations

import ast
import functools
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "klineage"

# Circles other branches are removing; empty once they merge.
KNOWN_CIRCLES = [
]

# third-party module -> the only places (module-name prefixes) that may import it
ROOMS = {
    "tree_sitter": ("klineage.parse",),
    "tree_sitter_cuda": ("klineage.parse",),
    "clang": ("klineage.parse",),
    "duckdb": ("klineage.store",),
    "anthropic": ("klineage.llm",),
    "openai": ("klineage.llm",),
    "httpx": ("klineage.llm",),
    "httpx2": ("klineage.llm",),
    "ctypes": ("klineage.gate.worker",),
}
# package room -> rooms of the package it must never import
FORBIDDEN = {
    "klineage.lineage": ("klineage.apply", "klineage.cli"),
    "klineage.llm": ("klineage.apply", "klineage.lineage", "klineage.heldout", "klineage.store", "klineage.gate",
                     "klineage.mechanisms", "klineage.cli"),
    "klineage.parse": ("klineage.mechanisms", "klineage.gate", "klineage.lineage", "klineage.apply", "klineage.llm",
                       "klineage.store", "klineage.heldout", "klineage.cli"),
    "klineage.mechanisms": ("klineage.lineage", "klineage.apply", "klineage.heldout", "klineage.cli", "klineage.report"),
    "klineage.gate": ("klineage.mechanisms", "klineage.lineage", "klineage.apply", "klineage.heldout", "klineage.cli"),
}
# (module, family name) -> why that module may spell a family's name as a string literal
FAMILY_LITERALS = {
    ("klineage.gate.gate", "wgmma"): "the instruction the gate's arch table matches (_ARCH_ONLY), named as nvcc "
                                     "names it: the gate sits below the families and cannot read a spec",
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


@functools.lru_cache(maxsize=None)
def imports(module: str) -> list[tuple[str, int]]:
    """(imported module, fully qualified, line) of every import in `module`: `from a.b import c` gives
    a.b.c when that is a module of the package, else a.b."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_nodes(tree)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.extend((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                head = package[:len(package) - (node.level - 1)]
                base = ".".join(head + ([base] if base else []))
            out.extend((f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base, node.lineno)
                       for a in node.names)
    return out


def _target(name: str) -> str | None:
    """The package module `name` reaches (its longest importable prefix), None outside the package."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def graph() -> dict[str, set[str]]:
    edges = {m: set() for m in MODULES}
    for m in MODULES:
        for name, _ in imports(m):
            t = _target(name)
            if t is not None and t != m:
                edges[m].add(t)
    return edges


def circles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of two or more modules (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _inside(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_graph_sees_deferred_imports():
    # llm_proposer imports parse_kernel inside a method: that is an edge too
    assert "klineage.llm" in graph()["klineage.lineage.llm_proposer"]


@pytest.mark.parametrize("third_party", sorted(ROOMS))
def test_a_third_party_library_is_imported_only_in_its_room(third_party):
    allowed = ROOMS[third_party]
    leaks = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {name}"
             for m in MODULES if not _inside(m, allowed)
             for name, line in imports(m) if name == third_party or name.startswith(third_party + ".")]
    assert not leaks, f"only {', '.join(allowed)} may import {third_party}:\n" + "\n".join(leaks)


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_a_room_does_not_reach_up(room):
    edges = graph()
    leaks = [f"{m} imports {t}" for m in MODULES if _inside(m, (room,))
             for t in sorted(edges[m]) if _inside(t, FORBIDDEN[room])]
    assert not leaks, "\n".join(leaks)


def _nvcc_argv(tree: ast.AST) -> list[int]:
    """Lines of a list or tuple literal whose first element is the string "nvcc" (a command line)."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, (ast.List, ast.Tuple)) and n.elts
            and isinstance(n.elts[0], ast.Constant) and n.elts[0].value == "nvcc"]


def test_only_the_compile_module_runs_nvcc():
    runs = {m: _nvcc_argv(ast.parse(MODULES[m].read_text())) for m in MODULES}
    assert runs["klineage.gate.compile"], "the check reads nvcc command lines as list literals"
    leaks = [f"{MODULES[m].relative_to(ROOT)}:{lines}" for m, lines in runs.items()
             if lines and m != "klineage.gate.compile"]
    assert not leaks, "nvcc runs only through klineage.gate.compile (run_nvcc):\n" + "\n".join(leaks)


def test_only_the_worker_touches_the_gpu():
    leaks = []
    for m, path in MODULES.items():
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Attribute) and n.attr == "cuda" and isinstance(n.value, ast.Name) \
                    and n.value.id == "torch" and m != "klineage.gate.worker":
                leaks.append(f"{path.relative_to(ROOT)}:{n.lineno}")
    assert not leaks, "torch.cuda outside klineage/gate/worker.py:\n" + "\n".join(leaks)


def test_no_import_circles():
    found = circles(graph())
    unknown = [sorted(c) for c in found if c not in KNOWN_CIRCLES]
    assert not unknown, f"import circles: {unknown}"


def test_the_known_circles_still_exist():
    # an entry is removed from KNOWN_CIRCLES as soon as its circle is gone
    found = circles(graph())
    stale = [sorted(c) for c in KNOWN_CIRCLES if c not in found]
    assert not stale, f"gone: remove from KNOWN_CIRCLES: {stale}"


def family_names() -> set[str]:
    """Every family's name, read from the source: the NAME of each class in klineage/mechanisms/families/
    and the tables of its declared.toml."""
    root = PACKAGE / "mechanisms" / "families"
    out = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if isinstance(stmt, ast.Assign) and any(getattr(t, "id", "") == "NAME" for t in stmt.targets) \
                            and isinstance(stmt.value, ast.Constant) and stmt.value.value:
                        out.add(stmt.value.value)
    for path in root.rglob("declared.toml"):
        out |= set(tomllib.loads(path.read_text()))
    return out


def test_family_names_are_read_from_the_families():
    names = family_names()
    assert {"vector_access", "warp_reduction", "wgmma", "warp_per_row"} <= names and len(names) >= 30


def test_no_family_table_outside_the_mechanisms():
    names = family_names()
    found = []
    for m, path in MODULES.items():
        if _inside(m, ("klineage.mechanisms",)):
            continue
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names \
                    and (m, n.value) not in FAMILY_LITERALS:
                found.append(f"{path.relative_to(ROOT)}:{n.lineno} names {n.value!r}")
    assert not found, ("family names outside klineage/mechanisms/: read them from the family's spec "
                       "(klineage.mechanisms.family_specs()), or add the place to FAMILY_LITERALS with its "
                       "reason:\n" + "\n".join(found))


def test_every_allowed_family_literal_is_still_there():
    for (m, name), why in FAMILY_LITERALS.items():
        assert why and any(isinstance(n, ast.Constant) and n.value == name
                           for n in ast.walk(ast.parse(MODULES[m].read_text()))), f"{m} no longer names {name}: drop it"
