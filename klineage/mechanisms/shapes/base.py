"""The contract of a shape rewriter (see klineage.mechanisms.shapes)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from klineage.mechanisms.base import Applied, NotApplicable


@dataclass(frozen=True)
class Shape:
    """What a recogniser read off a kernel: the shape's name, the `__global__` function it found, and
    its facts (operation, element types, pointer roles, extents, the structural mechanisms present)."""
    name: str
    kernel: str
    facts: dict = field(default_factory=dict)


class ShapeRewriter:
    """One computational shape: `recognise` a kernel of it, `rewrite` a mechanism into it.

    `mechanisms` are skill mechanism names (a card's `mechanism`, e.g. "block_per_row", "wgmma") this
    rewriter can add. Both methods return NotApplicable with a reason, never raise, for a kernel they
    do not fit. `config` carries the card's carrier / measured configuration (tile extents, threads,
    stages, ...) from which the rewrite chooses its parameters, falling back to its own defaults.

    `recognise` puts in `Shape.facts["mechanisms"]` the names (of `mechanisms`) it reads present in
    the kernel: the audit of a structural rewrite needs them for mechanisms no detector sees (a
    warp per row, a register cache, shared-memory tiling), and takes a rewrite only when exactly the
    rewritten mechanism appears there and none goes. `ladder` is the order in which the family's
    mechanisms are usually added to its plainest kernel: admission walks it from another workload's
    start kernel to reach a kernel a skill applies to (a warp shuffle needs a row shared first)."""
    name: ClassVar[str] = ""
    mechanisms: ClassVar[tuple[str, ...]] = ()
    ladder: ClassVar[tuple[str, ...]] = ()

    def recognise(self, source: str, workload=None) -> Shape | NotApplicable:
        raise NotImplementedError

    def rewrite(self, source: str, shape: Shape, mechanism: str, config: dict, workload=None) -> Applied | NotApplicable:
        raise NotImplementedError


REGISTRY: list[ShapeRewriter] = []


def register(cls: type[ShapeRewriter]) -> type[ShapeRewriter]:
    """Class decorator: one instance of `cls` joins the registry (two rewriters of one name is an error)."""
    if any(r.name == cls.name for r in REGISTRY):
        raise ValueError(f"shape rewriter {cls.name!r} registered twice")
    REGISTRY.append(cls())
    return cls
