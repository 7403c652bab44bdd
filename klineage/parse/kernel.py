"""A kernel's source parsed once: its syntax tree and its libclang facts, each computed on first use."""
from __future__ import annotations

from functools import cached_property

from klineage.parse import syntax
from klineage.parse.semantics import Semantics, analyze


class Kernel:
    """A kernel source with its syntax tree and libclang facts, computed on first use."""

    def __init__(self, source: str):
        self.source = source

    @cached_property
    def tree(self) -> syntax.SourceTree:
        return syntax.SourceTree(self.source)

    @cached_property
    def sem(self) -> Semantics:
        return analyze(self.source)

    def live(self, node) -> bool:
        """False when `node` sits in a preprocessor branch that is compiled out (no line of it
        starts an AST node for libclang)."""
        return any(self.sem.is_live(line) for line in range(node.start_point.row + 1, node.end_point.row + 2))

    def function_of(self, node) -> str:
        fn = syntax.enclosing_function(node)
        return syntax.function_name(fn) if fn is not None else "<file>"

    def lines(self, node) -> tuple[int, int]:
        return syntax.SourceTree.lines(node)

    def snippet(self, node, context: int = 0) -> str:
        a, b = self.lines(node)
        return self.tree.line_text(max(1, a - context), b + context)
