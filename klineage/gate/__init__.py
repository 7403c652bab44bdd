"""The gate: guard, compile, and the GPU worker behind them.

``worker_code_hash()`` names the code whose behaviour the GPU records of the gallery and fault
kernels prove (benchmarks/results/gate_*_gallery_faults.json): the modules of ENTRY_MODULES (the
worker that runs candidates and carries the dynamic defences, the driver that turns a hang or a
crash into a record, the gate that builds the worker's request and records its status) and every
klineage module they import, found by reading their import statements (``gate_modules()``), so a
module added to that graph is covered without being named here.
"""
from __future__ import annotations

import ast
import hashlib
from functools import lru_cache
from pathlib import Path

ENTRY_MODULES = ("klineage.gate.worker", "klineage.gate.pool", "klineage.gate.gate")
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding klineage/


def _module_file(name: str) -> Path | None:
    """The source file of klineage module `name` (a package's __init__.py), or None."""
    p = _PACKAGE_ROOT.joinpath(*name.split("."))
    for f in (p / "__init__.py", p.with_suffix(".py")):
        if f.is_file():
            return f
    return None


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imported(name: str, path: Path) -> set[str]:
    """The klineage modules module `name` (at `path`) imports when it is imported: its import
    statements outside function bodies and `if TYPE_CHECKING:` blocks (a function's own import runs
    only on the path that calls it: the default executor, a journal, the toolchain's version)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]))
                continue
            if isinstance(child, ast.Import):
                out.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[:len(package.split(".")) - (child.level - 1)]
                    base = ".".join(parts + ([child.module] if child.module else []))
                out.add(base)
                # `from pkg import mod` imports the module pkg.mod; `from mod import name` only mod
                out.update(f"{base}.{a.name}" for a in child.names if _module_file(f"{base}.{a.name}"))
            visit(child)

    visit(ast.parse(path.read_text(), filename=str(path)))
    return {m for m in out if m == "klineage" or m.startswith("klineage.")}


@lru_cache(maxsize=1)
def gate_modules() -> tuple[tuple[str, Path], ...]:
    """(module name, source file) of ENTRY_MODULES and every klineage module they import,
    transitively, with the package __init__ files of the entries; sorted by name."""
    todo = list(ENTRY_MODULES) + sorted({m.rpartition(".")[0] for m in ENTRY_MODULES})
    found: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        if name in found:
            continue
        path = _module_file(name)
        if path is None:
            raise RuntimeError(f"klineage.gate: {name} is imported by the gate's code but has no source file "
                               f"under {_PACKAGE_ROOT}: the worker's code hash cannot cover it")
        found[name] = path
        todo.extend(sorted(_imported(name, path) - set(found)))
    return tuple(sorted(found.items()))


def worker_code_digests() -> dict[str, str]:
    """{module file relative to the repository (klineage/...): sha256 of its bytes} over gate_modules()."""
    return {p.relative_to(_PACKAGE_ROOT).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for _, p in gate_modules()}


def worker_code_hash() -> str:
    """sha256 over the relative path, length and bytes of every file of gate_modules(), in name order."""
    h = hashlib.sha256()
    for _, p in gate_modules():
        data = p.read_bytes()
        h.update(f"{p.relative_to(_PACKAGE_ROOT).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()
