"""tree-sitter CUDA syntax trees, `.scm` queries kept as package data, and byte-range edits.

Hopper-era attributes that tree-sitter-cuda 0.21 does not know (`__cluster_dims__(...)`,
`__align__(n)` with any argument, `__maxnreg__(n)`, the third argument of `__launch_bounds__`),
and invocations of macros that expand to an attribute (`__global__ LAUNCH_BOUNDS(256) void f()`),
are blanked with spaces of the same length before parsing (and a loop macro's invocation, `FOR(i, n) {
... }`, reads as a `for(;;)` of the same length), so byte offsets and line numbers of the
tree are those of the original text and no ERROR node comes from them.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Iterable, Iterator

import tree_sitter as ts
import tree_sitter_cuda as tscuda

from klineage.errors import KLineageError

_PARENS = rb"\((?:[^()]|\([^()]*\))*\)"  # a parenthesised group, parentheses nested two deep
_ARG = rb"(?:[^(),]|" + _PARENS + rb")+"  # one macro argument
_BLANKED = re.compile(rb"(?:__cluster_dims__|__align__|__maxnreg__)\s*\((?:[^()]|" + _PARENS + rb")*\)")
_LAUNCH_BOUNDS_3 = re.compile(rb"__launch_bounds__\s*\(" + _ARG + rb"," + _ARG + rb"(," + _ARG + rb")\)")


Node = ts.Node  # a syntax-tree node: the type the mechanism families annotate with (they never import tree-sitter)


class ParseError(KLineageError):
    """A query file is missing or malformed, or an edit is out of range."""


@functools.lru_cache(maxsize=1)
def language() -> ts.Language:
    return ts.Language(tscuda.language())


@functools.lru_cache(maxsize=1)
def _parser() -> ts.Parser:
    return ts.Parser(language())


@functools.lru_cache(maxsize=None)
def load_query(name: str) -> ts.Query:
    """The compiled query `klineage/parse/queries/<name>.scm`; ParseError if absent or invalid."""
    try:
        text = resources.files("klineage.parse").joinpath("queries", f"{name}.scm").read_text()
    except FileNotFoundError:
        raise ParseError(f"no query file queries/{name}.scm in klineage.parse: add it or fix the name") from None
    try:
        return ts.Query(language(), text)
    except Exception as e:  # tree-sitter raises QueryError subclasses
        raise ParseError(f"query {name}.scm does not compile against tree-sitter-cuda: {e}") from e


def _blank(text: bytes) -> bytes:
    return re.sub(rb"[^\n]", b" ", text)


_ATTRIBUTE_MACRO = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\([^)]*\))?[ \t]+"
                              rb"(?:__launch_bounds__|__cluster_dims__|__maxnreg__|__align__)\b", re.M)


def attribute_macros(data: bytes) -> set[str]:
    """Names of macros that expand to a CUDA attribute (`#define LB(n) __launch_bounds__(n)`)."""
    return {m.group(1).decode() for m in _ATTRIBUTE_MACRO.finditer(data)}


def _blank_attribute_macros(data: bytes) -> bytes:
    """Blank the invocations of attribute macros: tree-sitter would read `__global__ LB(256) void f()`
    as two declarations and lose the kernel's __global__."""
    names = attribute_macros(data)
    if not names:
        return data
    alt = b"|".join(re.escape(n.encode()) for n in sorted(names))
    call = re.compile(rb"\b(?:" + alt + rb")\s*" + _PARENS)
    out = []
    for line in data.split(b"\n"):
        out.append(line if line.lstrip().startswith(b"#") else call.sub(lambda m: _blank(m.group(0)), line))
    return b"\n".join(out)


_DEFINE = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)\(([^)]*)\)((?:[^\n]*\\\n)*[^\n]*)", re.M)
_ENDS_IN_FOR = re.compile(rb"\bfor\s*\((?:[^()]|\([^()]*\))*\)\s*$")


def _loop_macros(data: bytes) -> dict[bytes, bytes]:
    """Function-like macros whose body ends with a `for (...)` header (an unrolled-for helper)."""
    return {m.group(1): m.group(3) for m in _DEFINE.finditer(data)
            if _ENDS_IN_FOR.search(m.group(3).replace(b"\\\n", b" ").rstrip())}


def _rewrite_loop_macros(data: bytes) -> bytes:
    """`LOOP_MACRO(i, n) { body }` reads as a call followed by a block: give tree-sitter a `for(;;)` of
    the same length instead, so the block is the loop's body (the node's text is still the macro's)."""
    names = _loop_macros(data)
    if not names:
        return data
    call = re.compile(rb"\b(?:" + b"|".join(re.escape(n) for n in sorted(names)) + rb")\s*" + _PARENS)
    out = []
    for line in data.split(b"\n"):
        if line.lstrip().startswith(b"#"):
            out.append(line)
            continue
        out.append(call.sub(lambda m: (b"for(;;)" + b" " * (len(m.group(0)) - 7)) if len(m.group(0)) >= 7
                            else m.group(0), line))
    return b"\n".join(out)


def _normalise(data: bytes) -> bytes:
    data = _blank_attribute_macros(data)
    data = _rewrite_loop_macros(data)
    data = _BLANKED.sub(lambda m: _blank(m.group(0)), data)
    return _LAUNCH_BOUNDS_3.sub(lambda m: m.group(0)[:m.start(1) - m.start()] + _blank(m.group(1))
                                + m.group(0)[m.end(1) - m.start():], data)


@dataclass(frozen=True)
class Edit:
    """Replace bytes [start, end) of the source with `text`."""
    start: int
    end: int
    text: str


class SourceTree:
    """One parsed kernel source: the text, its bytes, and the tree over them."""

    def __init__(self, text: str):
        self.text = text
        self.data = text.encode()
        self.tree = _parser().parse(_normalise(self.data))

    @property
    def root(self) -> ts.Node:
        return self.tree.root_node

    def error_nodes(self) -> list[ts.Node]:
        return [n for n in walk(self.root) if n.type == "ERROR" or n.is_missing]

    def text_of(self, node: ts.Node) -> str:
        return self.data[node.start_byte:node.end_byte].decode()

    @staticmethod
    def lines(node: ts.Node) -> tuple[int, int]:
        """1-based inclusive line range of `node`."""
        return node.start_point.row + 1, node.end_point.row + 1

    def matches(self, query: str, node: ts.Node | None = None) -> list[dict[str, list[ts.Node]]]:
        """Matches of query file `query` under `node` (default: the whole tree), in source order."""
        cur = ts.QueryCursor(load_query(query))
        found = cur.matches(node or self.root)
        return [caps for _, caps in sorted(found, key=lambda m: _first_byte(m[1]))]

    def captures(self, query: str, name: str, node: ts.Node | None = None) -> list[ts.Node]:
        cur = ts.QueryCursor(load_query(query))
        nodes = cur.captures(node or self.root).get(name, [])
        return sorted(nodes, key=lambda n: (n.start_byte, -n.end_byte))

    def edit(self, edits: Iterable[Edit]) -> str:
        return apply_edits(self.text, edits)

    def line_text(self, first: int, last: int) -> str:
        return "\n".join(self.text.splitlines()[first - 1:last])


def _first_byte(caps: dict[str, list[ts.Node]]) -> int:
    return min(n.start_byte for nodes in caps.values() for n in nodes)


def walk(node: ts.Node) -> Iterator[ts.Node]:
    """`node` and every node under it, in preorder (children left to right). A tree cursor makes a
    Python node only for the node it stands on, not for every child list on the way (several times
    faster on a kernel's tree)."""
    cursor = node.walk()  # rooted at `node`: it never climbs above it
    yield cursor.node
    while True:
        if cursor.goto_first_child():
            yield cursor.node
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return
        yield cursor.node


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """`text` with every edit applied (byte offsets refer to the original); ParseError on overlap."""
    data = text.encode()
    ordered = sorted(edits, key=lambda e: (e.start, e.end))
    out, pos = [], 0
    for e in ordered:
        if e.start < pos or e.end < e.start or e.end > len(data):
            raise ParseError(f"edit [{e.start}, {e.end}) overlaps another edit or leaves the source "
                             f"({len(data)} bytes): a rewrite must touch disjoint ranges")
        out += [data[pos:e.start], e.text.encode()]
        pos = e.end
    out.append(data[pos:])
    return b"".join(out).decode()


def ancestors(node: ts.Node) -> Iterator[ts.Node]:
    n = node.parent
    while n is not None:
        yield n
        n = n.parent


def enclosing_function(node: ts.Node) -> ts.Node | None:
    for a in ancestors(node):
        if a.type == "function_definition":
            return a
    return None


def function_name(fn: ts.Node) -> str:
    """Name of a function_definition node ('' when the declarator has no plain identifier)."""
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    if decl is None:
        return ""
    name = decl.child_by_field_name("declarator")
    return name.text.decode() if name is not None else ""


def function_qualifiers(fn: ts.Node) -> set[str]:
    """CUDA execution-space and inline qualifiers written on a function definition."""
    return {c.type for c in fn.children if c.type in ("__global__", "__device__", "__host__", "__forceinline__")}


def functions(tree: SourceTree) -> list[ts.Node]:
    return [n for n in walk(tree.root) if n.type == "function_definition"]


def node_path(tree: SourceTree, node: ts.Node) -> str:
    """A human-readable path to `node`: function name, then enclosing loops and branches."""
    parts = []
    for a in ancestors(node):
        if a.type == "function_definition":
            parts.append(function_name(a) or "<function>")
        elif a.type in ("for_statement", "while_statement", "do_statement"):
            parts.append(a.type.split("_")[0] + f"@L{a.start_point.row + 1}")
        elif a.type == "if_statement":
            parts.append(f"if@L{a.start_point.row + 1}")
    return " > ".join(reversed(parts)) + f" > {node.type}@L{node.start_point.row + 1}"
