"""Padding a shared tile's last dimension against bank conflicts: `__shared__ float tile[32][32 + 1]`
(or `[TILE][TILE + PAD]`) gives every row a pitch that is not a multiple of 32 banks, so a column
walk (`tile[threadIdx.x][c]`, the transposed read) hits 32 different banks instead of one.

Detected: a `__shared__` array of two or more dimensions whose last extent is `X + c`, with `c` a
positive literal or a padding-like name (`PAD`, `SKEW`, `TILE_PAD`, ...), and no `+` on the other
extents (a halo on every dimension is not padding). Locus: function (or `<file>`), `pad` and the
array name (`transpose:pad:tile`). Deoptimize drops the `+ c`; reoptimize puts the configuration's
text back (exact inverse), and on natural code adds ` + 1` to the last extent of a named (or the
first) 2-D or higher shared array whose last extent is a power-of-two literal or a name.
"""
from __future__ import annotations

import re

from klineage.mechanisms.base import Applied, Family, Feature, Form, Kernel, Mechanism, NotApplicable, detail
from klineage.mechanisms.vector_forms import strip_parens
from klineage.parse.syntax import Edit, enclosing_function, node_path, walk

_PAD_NAME = re.compile(r"(?i)pad|skew")


def _arrays(k: Kernel, rank: int = 2):
    """(function, name, decl, extents (outer first)) for live shared arrays of `rank` or more dimensions
    (rank 1: the flat arrays only)."""
    out = []
    for caps in k.tree.matches("shared_arrays"):
        decl, arr = caps["decl"][0], caps["array"][0]
        if not k.live(decl):
            continue
        extents, d = [], arr
        while d is not None and d.type == "array_declarator":
            extents.append(d.child_by_field_name("size"))
            d = d.child_by_field_name("declarator")
        if d is None or d.type != "identifier" or any(e is None for e in extents) or \
                (len(extents) < 2 if rank == 2 else len(extents) != 1):
            continue
        out.append((k.function_of(decl), d.text.decode(), decl, list(reversed(extents))))
    return out


def _pad_of(k: Kernel, extents):
    """(binary `X + c` node, c node) when the last extent is padded, else None."""
    last = strip_parens(extents[-1])
    if last.type != "binary_expression" or last.child_by_field_name("operator").type != "+":
        return None
    if any("+" in k.tree.text_of(e) for e in extents[:-1]):
        return None  # `[T + 2][T + 2]`: a halo, not padding
    c = last.child_by_field_name("right")
    if c.type == "number_literal":
        try:
            ok = int(c.text.decode().rstrip("uUlL"), 0) > 0
        except ValueError:
            ok = False
    else:
        ok = c.type == "identifier" and bool(_PAD_NAME.search(c.text.decode()))
    return (last, c) if ok else None


def _padded(k: Kernel):
    out = []
    for fn, name, decl, extents in _arrays(k):
        hit = _pad_of(k, extents)
        if hit is not None:
            out.append((f"{fn}:pad:{name}", (fn, name, decl, extents, *hit)))
    return out


def _flat_padded(k: Kernel):
    """Flat tiles with a padded row pitch: `__shared__ T s[ROWS * (COLS + c)]` (or `(COLS + c) * ROWS`),
    rows addressed as r * (COLS + c) + col by hand. A sum of extents (`[N + 2 * R]`, a halo) is not
    padding. Seen, not rewritten: every index expression carries the pitch."""
    out = []
    for fn, name, decl, extents in _arrays(k, rank=1):
        e = strip_parens(extents[0])
        if e.type != "binary_expression" or e.child_by_field_name("operator").type != "*":
            continue
        for side, other in ((e.child_by_field_name("right"), e.child_by_field_name("left")),
                            (e.child_by_field_name("left"), e.child_by_field_name("right"))):
            hit = _pad_of(k, [other, side])
            if hit is not None:
                out.append((f"{fn}:pad:{name}", (fn, name, decl, extents, *hit)))
                break
    return out


def _only_full_subscripts(k: Kernel, fn_node, name: str, rank: int) -> bool:
    """Every use of the array indexes all of its dimensions (no row pointer, no linear view)."""
    scope = fn_node if fn_node is not None else k.tree.root
    for n in walk(scope):
        if n.type != "identifier" or n.text.decode() != name:
            continue
        p, depth = n, 0
        while p.parent is not None and p.parent.type == "subscript_expression" and \
                p.parent.child_by_field_name("argument") == p:
            p, depth = p.parent, depth + 1
        if depth == 0 and n.parent is not None and n.parent.type in ("array_declarator",):
            continue  # the declaration
        if depth != rank:
            return False
        if p.parent is not None and p.parent.type == "pointer_expression" and \
                p.parent.child_by_field_name("operator").type == "&":
            return False  # &tile[r][c]: pointer arithmetic may walk across the padding
    return True


class SmemPadding(Mechanism):
    NAME = "smem_padding"
    DESCRIPTION = "padding a shared tile's last dimension (tile[N][N + 1]) against bank conflicts"
    PRECONDITIONS = {
        "layout": [{"condition": "the padding columns are never read or written: every index into the last "
                                 "dimension stays below the unpadded extent",
                    "fails_without": "dropping the padding moves those accesses into the next row: wrong values"},
                   {"condition": "the tile is only accessed through full subscripts, never as a flat array",
                    "fails_without": "a flat view assumes one row pitch; changing it scrambles the data"}],
        "storage": [{"condition": "the padded tile still fits the shared-memory budget (N*(N+c) elements)",
                     "fails_without": "ptxas rejects the kernel or occupancy drops"}],
        "hardware": [{"condition": "32 shared-memory banks of 4 bytes (every CUDA GPU since Fermi)",
                      "fails_without": "a different padding would be needed to spread the column accesses"}],
    }

    def detect(self, k: Kernel) -> list[Feature]:
        return [Feature(self.NAME, locus, k.lines(decl), anchor="shared tile",
                        detail=detail(pad=k.tree.text_of(c), extent=k.tree.text_of(extents[-1]), rank=len(extents)),
                        path=node_path(k.tree, decl))
                for locus, (fn, name, decl, extents, bin_, c) in _padded(k)]

    def detect_more(self, k: Kernel) -> list[Feature]:
        return [Feature(self.NAME, locus, k.lines(decl), anchor="shared tile",
                        detail=detail(pad=k.tree.text_of(c), extent=k.tree.text_of(extents[0]), rank=1),
                        removable=False, path=node_path(k.tree, decl))
                for locus, (fn, name, decl, extents, bin_, c) in _flat_padded(k)]

    def deoptimize(self, k: Kernel, feature: Feature):
        hit = dict(_padded(k)).get(feature.locus)
        if hit is None:
            return NotApplicable(f"no padded shared array at {feature.locus}")
        fn, name, decl, extents, bin_, c = hit
        if not _only_full_subscripts(k, enclosing_function(decl), name, len(extents)):
            return NotApplicable(f"`{name}` is used through a row pointer or flat view: the padding is part of "
                                 f"its indexing")
        left = bin_.child_by_field_name("left")
        pad = k.tree.data[left.end_byte:c.end_byte].decode()
        new = k.tree.edit([Edit(left.end_byte, c.end_byte, "")])
        text = k.tree.text_of(decl)
        rel = left.end_byte - decl.start_byte
        after = (decl.text[:rel] + decl.text[c.end_byte - decl.start_byte:]).decode()
        return Applied(new, self.NAME, feature.locus, before=text, after=after,
                       config={"function": fn, "array": name, "pad": pad})

    def reoptimize(self, k: Kernel, locus: str | None = None, config: dict | None = None):
        config = config or {}
        fname = config.get("function") or (locus.split(":pad:")[0] if locus and ":pad:" in locus else None)
        aname = config.get("array") or (locus.split(":pad:")[1] if locus and ":pad:" in locus else None)
        pad = config.get("pad", " + 1")
        for fn, name, decl, extents in _arrays(k):
            if (fname is not None and fn != fname) or (aname is not None and name != aname):
                continue
            if _pad_of(k, extents) is not None:
                if aname is not None:
                    return NotApplicable(f"`{name}` is already padded")
                continue
            last = strip_parens(extents[-1])
            text = k.tree.text_of(last)
            if not config.get("pad"):  # natural code: a power-of-two literal or a name
                pow2 = re.fullmatch(r"\d+", text) and int(text) >= 2 and int(text) & (int(text) - 1) == 0
                if not (pow2 or re.fullmatch(r"[A-Za-z_]\w*", text)):
                    if aname is not None:
                        return NotApplicable(f"last extent `{text}` of `{name}` is not a power of two or a name")
                    continue
            new = k.tree.edit([Edit(last.end_byte, last.end_byte, pad)])
            rel = last.end_byte - decl.start_byte
            after = (decl.text[:rel].decode() + pad + decl.text[rel:].decode())
            return Applied(new, self.NAME, f"{fn}:pad:{name}", before=k.tree.text_of(decl), after=after,
                           config={"function": fn, "array": name, "pad": pad})
        what = f"`{aname}`" if aname else "a 2-D shared array"
        return NotApplicable(f"no unpadded {what} to pad" + (f" in {fname}" if fname else ""))


FAMILY = Family(
    SmemPadding, rank=70,
    forms=(
        Form("a __shared__ array of two or more dimensions whose last extent is X + c (a literal or a padding-like "
             "name)"),
        Form("a flat tile with a padded row pitch (__shared__ T s[ROWS * (COLS + c)])", rewritable=False),
    ),
    forward=("reoptimize",),
    anchor_query=("(declaration (type_qualifier) @q (array_declarator size: (binary_expression)) (#eq? @q "
                  '"__shared__"))'),
    addresses=frozenset({"memory"}),
    rules=("shared_memory",),
    conflicts=(("shared index", "smem_swizzle"),),
)
