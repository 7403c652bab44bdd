"""`__restrict__` on pointer parameters: the compiler may assume the pointers do not alias, keep
loaded values in registers across stores and use the read-only path.

Locus: one function (all of its restrict-qualified parameters together; removing it from one
parameter of several is not a separate optimization). Spellings: `__restrict__`, `__restrict`, and
an object-like macro defined as one of them (`#define RESTRICT __restrict__`), in any declarator
style the author wrote: `const T *__restrict__ p`, `T* __restrict__ p`, `T * __restrict p`,
`T *__restrict__ const p`, `T *const __restrict__ p`, `T **__restrict__ p`, a qualifier and its
name on two lines.

Deoptimize deletes each qualifier and the blank that follows it (`*__restrict__ p` -> `*p`,
`T* __restrict__ p` -> `T* p`). Reoptimize puts the author's text back byte for byte: the
configuration carries, for each parameter whose spelling the canonical insertion would not give
back, the text removed and where; every other parameter gets the canonical `__restrict__` right
after its `*` (`T* p` -> `T* __restrict__ p`, `T *p` -> `T *__restrict__ p`). When the recorded
parameter text is no longer there, the canonical insertion is used and the result says so
(`config["exact"] = False`, with a note).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from klineage.mechanisms.base import Applied, Family, Feature, Form, Kernel, Mechanism, NotApplicable, detail
from klineage.parse import syntax
from klineage.parse.syntax import Edit

SPELLINGS = ("__restrict__", "__restrict")
CANONICAL = "__restrict__"
_MACRO = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)[ \t]+(__restrict__|__restrict)[ \t]*$", re.M)


@dataclass(frozen=True)
class _Param:
    fn: object          # the function_definition node
    fname: str
    name: str
    param: object       # the parameter_declaration node
    star: object        # the `*` that the qualifier (or its absence) follows
    qual: object | None  # the restrict token node, or None
    start: int          # byte range of the whole parameter text (the name may sit past the node
    end: int            # when a macro spelling made tree-sitter see an ERROR)


def _macros(k: Kernel) -> set[str]:
    return {m for m, _ in _MACRO.findall(k.source)}


def _params(k: Kernel) -> list[_Param]:
    """Every pointer parameter of every function definition, with its restrict token where written."""
    macros = _macros(k)
    out = []
    for caps in k.tree.matches("pointer_params"):
        fn, decl, param = caps["function"][0], caps["declarator"][0], caps["param"][0]
        inner = decl  # the pointer declarator that holds the name (`**__restrict__ p` qualifies the inner one)
        while True:
            nxt = inner.child_by_field_name("declarator")
            if nxt is None or nxt.type != "pointer_declarator":
                break
            inner = nxt
        ident = inner.child_by_field_name("declarator")
        if ident is None or ident.type != "identifier":
            continue
        star = next((c for c in inner.children if c.type == "*"), None)
        qual, name, end = None, ident.text.decode(), param.end_byte
        for c in inner.children:
            if c.type == "type_qualifier" and c.text.decode() in SPELLINGS:
                qual = c
            elif c.type == "ms_pointer_modifier" and any(g.type == "ms_restrict_modifier" for g in c.children):
                qual = c
        if name in macros:  # `T *RESTRICT p`: tree-sitter takes the macro for the name, the name for an error
            err = param.next_sibling
            real = next((g for g in (err.children if err is not None and err.type == "ERROR" else [])
                         if g.type == "identifier"), None)
            if real is None:
                continue
            qual, name, end = ident, real.text.decode(), err.end_byte
        if star is None:
            continue
        out.append(_Param(fn, syntax.function_name(fn), name, param, star, qual, param.start_byte, end))
    return out


def _removal(data: bytes, q) -> tuple[int, int]:
    """The bytes deleting qualifier `q` takes: the token and the blanks after it, or, when the name
    follows with no blank (`__restrict__` last before a `)`), the blanks before it."""
    end = q.end_byte
    while end < len(data) and data[end:end + 1] in (b" ", b"\t", b"\n", b"\r"):
        end += 1
    if end > q.end_byte:
        return q.start_byte, end
    start = q.start_byte
    while start > 0 and data[start - 1:start] in (b" ", b"\t"):
        start -= 1
    return start, q.end_byte


def _canonical(data: bytes, star) -> Edit:
    """The canonical insertion after `star`: `T* p` -> `T* __restrict__ p`, `T *p` -> `T *__restrict__ p`."""
    nxt = data[star.end_byte:star.end_byte + 1]
    text = f" {CANONICAL}" if nxt in (b" ", b"\t", b"\n") else f"{CANONICAL} "
    return Edit(star.end_byte, star.end_byte, text)


class Restrict(Mechanism):
    NAME = "restrict"
    DESCRIPTION = "__restrict__ pointer parameters (no-alias promise)"
    PRECONDITIONS = {
        "layout": [{"condition": "the restrict-qualified buffers do not overlap each other",
                    "fails_without": "the compiler may reorder or cache loads across stores to an aliased "
                                     "buffer: wrong values, silently"}],
    }

    def detect(self, k: Kernel) -> list[Feature]:
        by_fn: dict[str, list[_Param]] = {}
        for p in _params(k):
            if p.qual is not None:
                by_fn.setdefault(p.fname, []).append(p)
        feats = []
        for name, items in by_fn.items():
            sig = items[0].fn.child_by_field_name("declarator")
            feats.append(Feature(self.NAME, f"{name}:params", k.lines(sig), anchor="pointer parameters",
                                 detail=detail(params=",".join(p.name for p in items), count=len(items)),
                                 path=f"{name} > parameter list"))
        return feats

    def deoptimize(self, k: Kernel, feature: Feature) -> Applied | NotApplicable:
        fname = feature.locus.split(":")[0]
        quals = [p for p in _params(k) if p.fname == fname and p.qual is not None]
        if not quals:
            return NotApplicable(f"{fname} has no __restrict__ parameter")
        data = k.tree.data
        edits = [Edit(*_removal(data, p.qual), "") for p in quals]
        new = k.tree.edit(edits)
        config: dict = {"params": [p.name for p in quals]}
        # where the canonical insertion would not give the author's text back, record that text
        restore = {}
        nk = Kernel(new)
        after = {p.name: p for p in _params(nk) if p.fname == fname}
        for p, e in zip(quals, edits):
            a = after.get(p.name)
            if a is None:
                return NotApplicable(f"{fname}: parameter {p.name} is not found again once {p.qual.text.decode()} "
                                     "is removed; the parameter list is not one the rewrite can read")
            a_text = nk.tree.data[a.start:a.end].decode()
            canon = syntax.apply_edits(a_text, [_shift(_canonical(nk.tree.data, a.star), a.start)])
            original = data[p.start:p.end].decode()
            if canon != original:
                restore[p.name] = {"at": e.start - p.start, "text": data[e.start:e.end].decode(), "from": a_text}
        if restore:
            config["restore"] = restore
        sig = quals[0].fn.child_by_field_name("declarator")
        after_fn = next(f for f in syntax.functions(nk.tree) if syntax.function_name(f) == fname)
        return Applied(new, self.NAME, feature.locus, before=k.tree.text_of(sig),
                       after=nk.tree.text_of(after_fn.child_by_field_name("declarator")), config=config)

    def reoptimize(self, k: Kernel, locus: str | None = None, config: dict | None = None):
        params = _params(k)
        fname = locus.split(":")[0] if locus else next((p.fname for p in params
                                                        if "__global__" in syntax.function_qualifiers(p.fn)), None)
        if fname is None:
            return NotApplicable("no __global__ function with pointer parameters")
        config = config or {}
        wanted = set(config.get("params") or [p.name for p in params if p.fname == fname])
        restore = config.get("restore") or {}
        data = k.tree.data
        edits, inexact = [], []
        for p in params:
            if p.fname != fname or p.name not in wanted or p.qual is not None:
                continue
            rec = restore.get(p.name)
            if rec is not None and data[p.start:p.end].decode() == rec["from"]:
                at = p.start + rec["at"]
                edits.append(Edit(at, at, rec["text"]))
                continue
            if rec is not None:
                inexact.append(p.name)
            edits.append(_canonical(data, p.star))
        if not edits:
            return NotApplicable(f"{fname} has no unqualified pointer parameter to mark __restrict__")
        fn = next(p.fn for p in params if p.fname == fname)
        new = k.tree.edit(edits)
        nk = Kernel(new)
        nfn = next(f for f in syntax.functions(nk.tree) if syntax.function_name(f) == fname)
        out_cfg: dict = {"params": sorted(wanted)}
        if restore:
            out_cfg["restore"] = restore
        if inexact:
            out_cfg["exact"] = False
            out_cfg["note"] = (f"the text of {', '.join(inexact)} differs from the one recorded when the qualifier "
                               f"came off: {CANONICAL} was inserted after the '*' instead of the author's spelling")
        return Applied(new, self.NAME, f"{fname}:params", before=k.tree.text_of(fn.child_by_field_name("declarator")),
                       after=nk.tree.text_of(nfn.child_by_field_name("declarator")), config=out_cfg)


def _shift(e: Edit, by: int) -> Edit:
    return Edit(e.start - by, e.end - by, e.text)


FAMILY = Family(
    Restrict, rank=50,
    forms=(
        Form("__restrict__ or __restrict (or a macro defined as one) on a function's pointer parameters, in any "
             "declarator style"),
    ),
    forward=("reoptimize",),
    anchor_query=("(parameter_declaration declarator: (pointer_declarator (type_qualifier) @q (#eq? @q "
                  '"__restrict__")))'),
    addresses=frozenset({"memory"}),
    rules=("restrict",),
)
