"""The two forward rewrites of a one-element-per-thread kernel (klineage.mechanisms.elementwise):
vector_access (`vectorize`) and coarsening (`coarsen`), each the kernel's tiled form
(klineage.mechanisms.elementwise_emit), its per-thread count and its host grid.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from klineage.mechanisms.base import Kernel, NotApplicable, squash
from klineage.mechanisms.elementwise import ELEMENTS, Flat, _kernel_spec, _norm, _params, flat_kernels
from klineage.mechanisms.elementwise_emit import emit, emit_phased, tiled_scalar
from klineage.mechanisms.vector_forms import insert_at, top_level, vector_features
from klineage.parse import syntax
from klineage.parse.syntax import Edit, Node, walk

COUNT_SUFFIX = "ITEMS_PER_THREAD"
# the corpus's convention for a tuning constant (the sweep materializer reads the same form)
TUNABLE = re.compile(r"#ifndef (\w+)\s*\n\s*#define \1 (\d+)\b[^\n]*\n\s*#endif")
DEFAULT_COUNT = 4


# ---------------------------------------------------------------- the host launch

def _strip(n: Node | None) -> Node | None:
    """Parentheses and casts off an expression."""
    while n is not None:
        if n.type == "parenthesized_expression" and n.named_child_count == 1:
            n = n.named_children[0]
        elif n.type == "cast_expression":
            n = n.child_by_field_name("value")
        else:
            return n
    return n


@dataclass
class Launch:
    grid: Node      # the formula node `(N + M - 1) / M` the rewrite replaces
    count: str         # N as written in the formula
    block: str         # the launch's block-size argument as written
    per_block: str     # M, normalised


def _launch(k: Kernel, flat: Flat, factors: list[str]) -> Launch | str:
    """The single launch of the kernel and its grid formula `(N + M - 1) / M`, with M the launch's
    block size times `factors` (the elements per thread the kernel has now)."""
    launches = []
    for n in walk(k.tree.root):
        if n.type == "call_expression" and any(c.type == "kernel_call_syntax" for c in n.children):
            f = n.child_by_field_name("function")
            if f is not None and k.tree.text_of(f) == flat.kernel:
                launches.append(n)
            elif f is not None and f.type == "template_function" and \
                    f.child_by_field_name("name").text.decode() == flat.kernel:
                launches.append(n)
    if len(launches) != 1:
        return f"{flat.kernel} is launched {len(launches)} times in this file: the rewrite needs its one launch"
    call = launches[0]
    if call.child_by_field_name("function").type != "identifier":
        return f"the launch of {flat.kernel} names template arguments"
    cfg = next(c for c in call.children if c.type == "kernel_call_syntax")
    conf = [c for c in cfg.named_children if c.type != "comment"]
    args = [a for a in call.child_by_field_name("arguments").named_children if a.type != "comment"]
    names = [p[0] for p in _params(flat.fn)]
    if len(conf) < 2 or len(args) != len(names):
        return f"the launch of {flat.kernel} does not pass grid, block and every parameter"
    narg = _norm(k.tree.text_of(args[names.index(flat.bound)]))
    block = k.tree.text_of(conf[1])
    grid = _strip(conf[0])
    host = syntax.enclosing_function(call)
    if grid is not None and grid.type == "identifier":
        gname = grid.text.decode()
        inits, others = [], []
        for n in walk(host):
            if n.type == "init_declarator" and n.child_by_field_name("declarator").type == "identifier" \
                    and n.child_by_field_name("declarator").text.decode() == gname:
                inits.append(n)
            elif n.type == "assignment_expression" and _strip(n.child_by_field_name("left")) is not None \
                    and k.tree.text_of(_strip(n.child_by_field_name("left"))) == gname:
                others.append(n)
            elif n.type == "update_expression" and k.tree.text_of(_strip(n.child_by_field_name("argument"))) == gname:
                others.append(n)
            elif n.type == "pointer_expression" and n.child_by_field_name("operator").type == "&" and \
                    k.tree.text_of(_strip(n.child_by_field_name("argument"))) == gname:
                others.append(n)
        if len(inits) != 1 or others or inits[0].start_byte > call.start_byte:
            return f"the grid {gname} is not set once from a formula before the launch"
        formula = inits[0].child_by_field_name("value")
    else:
        formula = conf[0]
    f = _strip(formula)
    if f is None or f.type != "binary_expression" or f.child_by_field_name("operator").type != "/":
        return f"the grid {squash(k.tree.text_of(formula))} is not (N + B - 1) / B"
    m = _norm(k.tree.text_of(f.child_by_field_name("right")))
    count = _count_text(k, f.child_by_field_name("left"), m)
    if count is None or _norm(count) != narg:
        return (f"the grid {squash(k.tree.text_of(f))} is not ({squash(k.tree.text_of(args[names.index(flat.bound)]))}"
                f" + B - 1) / B for the kernel's bound {flat.bound}")
    want = "*".join(factors + [_norm(block)])
    if m != want:
        return (f"the grid divides by {m}, not by the elements one block covers ({want.replace('*', ' * ')}): "
                f"the kernel and the launch disagree in a way this rewrite does not follow")
    return Launch(f, count, block, m)


def _count_text(k: Kernel, left: Node, m: str) -> str | None:
    """N as written, when the numerator is N + M - 1 (or N + (M - 1)); None otherwise."""
    def bare(n):
        while n is not None and n.type == "parenthesized_expression" and n.named_child_count == 1:
            n = n.named_children[0]
        return n

    def op(n, o):
        return n is not None and n.type == "binary_expression" and n.child_by_field_name("operator").type == o

    n = bare(left)
    if op(n, "-") and _norm(k.tree.text_of(n.child_by_field_name("right"))) == "1":
        s = bare(n.child_by_field_name("left"))
        if op(s, "+") and _norm(k.tree.text_of(s.child_by_field_name("right"))) == m:
            return k.tree.text_of(s.child_by_field_name("left"))
    if op(n, "+"):
        right = _norm(k.tree.text_of(n.child_by_field_name("right")))
        if right == f"{m}-1" or (m.isdigit() and right.isdigit() and int(right) == int(m) - 1):
            return k.tree.text_of(n.child_by_field_name("left"))
    return None


def grid_edit(launch: Launch, block: str, factors: list[str]) -> Edit:
    per = " * ".join(factors + [block])
    per_p = per if re.fullmatch(r"\w+", per) else f"({per})"
    return Edit(launch.grid.start_byte, launch.grid.end_byte, f"({launch.count} + {per} - 1) / {per_p}")


# ---------------------------------------------------------------- the per-thread count

def count_name(k: Kernel, flat: Flat) -> str:
    """A name for the per-thread count: the prefix of the file's tuning constants (AXPBY_BLOCK ->
    AXPBY_ITEMS_PER_THREAD), else the kernel's name without _kernel / _naive."""
    tun = [m.group(1) for m in TUNABLE.finditer(k.source) if "_" in m.group(1)]
    if tun:
        prefix = tun[0].rsplit("_", 1)[0]
    else:
        words = [w for w in flat.kernel.upper().split("_") if w not in ("KERNEL", "NAIVE", "") ]
        prefix = "_".join(words) or "KL"
    name = f"{prefix}_{COUNT_SUFFIX}"
    while re.search(r"\b" + re.escape(name) + r"\b", k.source):
        name = "KL_" + name
    return name


def count_define(k: Kernel, flat: Flat, name: str, value: int) -> Edit:
    """Insert `#ifndef NAME / #define NAME value / #endif` after the last tuning constant before the
    kernel, or above the kernel."""
    text = (f"#ifndef {name}\n#define {name} {value}   // items per thread: elements, or 16-byte vectors "
            f"(coarsening; 1: off)\n#endif\n")
    kstart = top_level(flat.fn).start_byte
    last = None
    for m in TUNABLE.finditer(k.source):
        end = len(k.source[:m.end()].encode())
        if end <= kstart:
            last = end
    if last is not None:
        at = last + (1 if k.tree.data[last:last + 1] == b"\n" else 0)
        return Edit(at, at, text)
    at = insert_at(k, flat.fn)
    return Edit(at, at, text + "\n")


def not_flat(why: list[str]) -> NotApplicable:
    return NotApplicable("no one-element-per-thread kernel to rewrite: " + ("; ".join(why) or "no __global__ kernel"))


# ---------------------------------------------------------------- the two rewrites

def _replace_body(k: Kernel, fn: Node, text: str) -> Edit:
    body = fn.child_by_field_name("body")
    return Edit(body.start_byte, body.end_byte, text)


def vector_width(flat: Flat) -> str | None:
    """Why the flat kernel's pointers have no common 16-byte vector form, or None."""
    for p in flat.ptrs:
        if p.elem not in ELEMENTS:
            return f"{flat.kernel}: {p.name} points to {p.elem}: no 16-byte vector form for that type here"
    if len({ELEMENTS[p.elem][0] for p in flat.ptrs}) != 1:
        return (f"{flat.kernel}: the pointers accessed at [{flat.index}] have elements of different sizes "
                f"({', '.join(f'{p.name}: {p.elem}' for p in flat.ptrs)}): one vector width does not fit them all")
    return None


def vectorize(k: Kernel):
    """vector_access on a flat kernel, or on the coarsened (items of one element) tiled form."""
    flats, why = flat_kernels(k)
    for flat in flats:
        if vector_width(flat):
            why.append(vector_width(flat))
            continue
        launch = _launch(k, flat, [])
        if isinstance(launch, str):
            why.append(launch)
            continue
        name = count_name(k, flat)
        lanes = flat.lanes
        edits = [_replace_body(k, flat.fn, emit(flat, True, name)), count_define(k, flat, name, 1),
                 grid_edit(launch, launch.block, [str(lanes), name])]
        return _applied(k, flat.fn, edits, "vector_access",
                        {"form": "flat elementwise", "kernel": flat.kernel, "lanes": lanes,
                         "vector": ELEMENTS[flat.ptrs[0].elem][1], "pointers": [p.name for p in flat.ptrs],
                         "count": name, "count_value": 1})
    for fn in syntax.functions(k.tree):
        if "__global__" not in syntax.function_qualifiers(fn):
            continue
        got = tiled_scalar(k, fn)
        if got is None:
            continue
        spec, name = got
        if vector_width(spec):
            why.append(vector_width(spec))
            continue
        launch = _launch(k, spec, [name])
        if isinstance(launch, str):
            why.append(launch)
            continue
        edits = [_replace_body(k, fn, emit(spec, True, name)),
                 grid_edit(launch, launch.block, [str(spec.lanes), name])]
        return _applied(k, fn, edits, "vector_access",
                        {"form": "coarsened elementwise", "kernel": spec.kernel, "lanes": spec.lanes,
                         "vector": ELEMENTS[spec.ptrs[0].elem][1], "pointers": [p.name for p in spec.ptrs],
                         "count": name})
    return not_flat(why)


def coarsen(k: Kernel, value: int):
    """coarsening on a flat kernel (`value` elements per thread through a new per-thread count), or
    on a flat-index kernel whose body declares what it loads, then stores (`value` items)."""
    flats, why = flat_kernels(k)
    for flat in flats:
        launch = _launch(k, flat, [])
        if isinstance(launch, str):
            why.append(launch)
            continue
        name = count_name(k, flat)
        edits = [_replace_body(k, flat.fn, emit(flat, False, name)), count_define(k, flat, name, value),
                 grid_edit(launch, launch.block, [name])]
        return _applied(k, flat.fn, edits, "coarsening",
                        {"form": "flat elementwise", "kernel": flat.kernel, "name": name, "value": str(value),
                         "previous": "flat", "pointers": [p.name for p in flat.ptrs]}, locus=name)
    for fn in syntax.functions(k.tree):
        if "__global__" not in syntax.function_qualifiers(fn) or not k.live(fn):
            continue
        if any(f.fn == fn for f in flats):
            continue
        ph = _kernel_spec(k, fn, any_index=True)
        if isinstance(ph, str):
            if ph not in why:
                why.append(ph)
            continue
        launch = _launch(k, ph, [])
        if isinstance(launch, str):
            why.append(launch)
            continue
        name = count_name(k, ph)
        edits = [_replace_body(k, fn, emit_phased(ph, name)), count_define(k, ph, name, value),
                 grid_edit(launch, launch.block, [name])]
        return _applied(k, fn, edits, "coarsening",
                        {"form": "loads then stores", "kernel": ph.kernel, "name": name, "value": str(value),
                         "previous": "flat", "registers": [v for v, _ in ph.locals]}, locus=name)
    return not_flat(why)


def _applied(k: Kernel, fn: Node, edits: list[Edit], mechanism: str, config: dict, locus: str | None = None):
    from klineage.mechanisms.base import Applied
    new = k.tree.edit(edits)
    if locus is None:
        kname = syntax.function_name(fn)
        feats = [f for f in vector_features(Kernel(new)) if f.locus.startswith(f"{kname}:")]
        locus = feats[0].locus if feats else kname
    body = fn.child_by_field_name("body")
    nk = Kernel(new)
    nfn = next(f for f in syntax.functions(nk.tree) if syntax.function_name(f) == syntax.function_name(fn))
    return Applied(new, mechanism, locus, before=k.tree.text_of(body),
                   after=nk.tree.text_of(nfn.child_by_field_name("body")), config=config)
