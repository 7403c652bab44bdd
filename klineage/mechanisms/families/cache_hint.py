"""Read-only and cache-hinted global accesses: `__ldg` (read-only / non-coherent path), `__ldcs`
(evict-first streaming), `__ldcg` (cache in L2 only), `__ldca`, `__ldlu`, `__ldcv`, and the stores
`__stcs`, `__stcg`, `__stwt`, `__stwb`.

Locus: one call (function name, intrinsic and argument text). Deoptimize turns the hinted access
into the plain one (`__ldg(p)` -> `*(p)`, `__stcs(p, v)` -> `*(p) = (v)`); reoptimize is the exact
inverse, and on natural code wraps a plain dereference of a pointer (`*p`, `*(p + i)`, `p[i]`) in
the hint given by the configuration (default `__ldg`).
"""
from __future__ import annotations

import re

from klineage.mechanisms.base import Applied, Family, Feature, Form, Kernel, Mechanism, NotApplicable, detail, \
    number_loci, squash
from klineage.parse.syntax import Edit, node_path

LOADS = ("__ldg", "__ldcs", "__ldcg", "__ldca", "__ldlu", "__ldcv")
STORES = ("__stcs", "__stcg", "__stwt", "__stwb")
HINT_OF = {"__ldg": "read-only path", "__ldcs": "evict-first (streaming) load", "__ldcg": "L2-only load",
           "__ldca": "cache-all load", "__ldlu": "last-use load", "__ldcv": "volatile (no cache) load",
           "__stcs": "evict-first (streaming) store", "__stcg": "L2-only store",
           "__stwt": "write-through store", "__stwb": "write-back store"}


def _hinted(k: Kernel):
    items = []
    for caps in k.tree.matches("calls"):
        callee, args, call = caps["callee"][0], caps["args"][0], caps["call"][0]
        name = callee.text.decode()
        if name not in LOADS + STORES or not k.live(call):
            continue
        argv = [a for a in args.named_children if a.type != "comment"]
        if (name in LOADS and len(argv) != 1) or (name in STORES and len(argv) != 2):
            continue
        fn = k.function_of(call)
        items.append((f"{fn}:{name}:{squash(k.tree.text_of(argv[0]))}", (call, name, argv)))
    return number_loci(items)


_CACHE_OPS = ("ca", "cg", "cs", "lu", "cv", "wt", "wb")


def _asked_hints(ck, i) -> list[str]:
    """The cache operators of a global load or store that the author asked for: any explicit operator
    (.cs .cg .lu .ca .cv .wt, L1:: / L2:: eviction policies), and .nc where it comes from an intrinsic
    (__ldg) or hand-written PTX rather than from the compiler's own reading of `const __restrict__`."""
    if i.op not in ("ld", "st") or i.space not in ("global", "generic"):
        return []
    ops = [p for p in i.parts if p in _CACHE_OPS or p.startswith(("L1::", "L2::evict", "L2::cache_hint"))]
    if "nc" in i.parts and (i.asm or ck.intrinsics(i) & set(LOADS)):
        ops.append("nc")
    return ops


_PTX_HINT = re.compile(r"^(?:ld|st)\.global(?:\.\w+)*?\.(?:nc|cs|cg|lu|ca|cv|wt|wb|L1::\w+|L2::evict\w*|"
                       r"L2::cache_hint)\b")


def _other_forms(k: Kernel) -> list[Feature]:
    """Hints the rewrite does not take (seen, not removable): hand-written PTX loads and stores with a
    cache operator, and project macros over the intrinsics (`#define LDG(p) __ldg(p)`)."""
    from klineage.mechanisms.codescan import asm_ops, call_args, macro_calls
    items = []
    for op in asm_ops(k):
        if _PTX_HINT.match(op.opcode):
            items.append((f"{op.function}:asm:{op.opcode}", (op.node, op.opcode, "inline PTX")))
    alt = "|".join(map(re.escape, LOADS + STORES))
    for fn, call, macro, m in macro_calls(k, rf"\b({alt})\s*\("):
        args = call_args(call)
        items.append((f"{fn}:{macro}:{squash(k.tree.text_of(args[0])) if args else ''}", (call, m.group(1), macro)))
    out = []
    for locus, (node, what, via) in number_loci(items):
        kind = "store" if what.startswith(("st", "__st")) else "load"
        out.append(Feature(CacheHint.NAME, locus, k.lines(node), anchor=f"global {kind}",
                           detail=detail(intrinsic=what, hint=HINT_OF.get(what, what), via=via), removable=False,
                           path=node_path(k.tree, node)))
    return out


def _paren(text: str) -> str:
    return text if re.fullmatch(r"[A-Za-z_]\w*", text) else f"({text})"


class CacheHint(Mechanism):
    NAME = "cache_hint"
    DESCRIPTION = "read-only / cache-hinted global loads and stores (__ldg, __ldcs, __ldcg, __stcs, __stwt)"
    PRECONDITIONS = {
        "storage": [{"condition": "data read through __ldg / ld.global.nc is not written by the same kernel",
                     "fails_without": "the non-coherent read-only path may return stale values"}],
        "hardware": [{"condition": "compute capability >= 3.5 (read-only data cache)",
                      "fails_without": "__ldg falls back to an ordinary load (no effect)"}],
    }

    def detect(self, k: Kernel) -> list[Feature]:
        out = []
        for locus, (call, name, argv) in _hinted(k):
            kind = "load" if name in LOADS else "store"
            out.append(Feature(self.NAME, locus, k.lines(call), anchor=f"global {kind}",
                               detail=detail(intrinsic=name, hint=HINT_OF[name]), path=node_path(k.tree, call)))
        return out

    def detect_more(self, k: Kernel) -> list[Feature]:
        return _other_forms(k)

    def compiled(self, ck) -> list:
        """Global accesses carrying a cache operator the source asked for (see _asked_hints)."""
        out = []
        for fn in ck.module.functions:
            for i in fn.instrs:
                ops = _asked_hints(ck, i)
                if ops:
                    site = ck.site(self.NAME, fn, [i])
                    if site is not None:
                        out.append(site)
        return out

    def deoptimize(self, k: Kernel, feature: Feature):
        found = dict(_hinted(k)).get(feature.locus)
        if found is None:
            return NotApplicable(f"no hinted access at {feature.locus}")
        call, name, argv = found
        ptr = _paren(k.tree.text_of(argv[0]))
        plain = f"*{ptr}" if name in LOADS else f"*{ptr} = {_paren(k.tree.text_of(argv[1]))}"
        if name in STORES and call.parent is not None and call.parent.type != "expression_statement":
            return NotApplicable("a hinted store used as a value cannot become an assignment statement")
        new = k.tree.edit([Edit(call.start_byte, call.end_byte, plain)])
        config = {"intrinsic": name, "call": k.tree.text_of(call), "plain": plain,
                  "function": feature.locus.split(":")[0]}
        if _same_address_elsewhere(k, call, squash(k.tree.text_of(argv[0]))):
            config["line"] = k.lines(call)[0]  # the address is accessed elsewhere too: the hint goes back here
        return Applied(new, self.NAME, feature.locus, before=k.tree.text_of(call), after=plain, config=config)

    def reoptimize(self, k: Kernel, locus: str | None = None, config: dict | None = None):
        config = config or {}
        if config.get("plain") and config.get("call"):
            return self._restore(k, config, locus)
        return self._wrap_natural(k, config.get("intrinsic", "__ldg"))

    def _restore(self, k: Kernel, config: dict, locus: str | None):
        fname, plain = config["function"], config["plain"]
        from klineage.parse.syntax import walk
        cands = [n for n in walk(k.tree.root) if n.type in ("pointer_expression", "assignment_expression")]
        if config.get("line"):  # one of identical accesses: the one on the line it was taken from first
            cands.sort(key=lambda n: k.lines(n)[0] != config["line"])
        for n in cands:
            if k.function_of(n) == fname and squash(k.tree.text_of(n)) == squash(plain):
                new = k.tree.edit([Edit(n.start_byte, n.end_byte, config["call"])])
                return Applied(new, self.NAME, locus or f"{fname}:{config['intrinsic']}", before=plain,
                               after=config["call"], config=dict(config))
        return NotApplicable(f"no `{plain}` in {fname} to put the {config['intrinsic']} hint back on")

    def _wrap_natural(self, k: Kernel, intrinsic: str):
        if intrinsic not in LOADS:
            return NotApplicable(f"natural rewrite only adds load hints, not {intrinsic}")
        for fn in k.sem.functions:
            if fn.space == "host":
                continue
            consts = {p.name for p in fn.params if p.pointee and p.pointee.startswith("const ")}
            for n in _expressions(k):
                if k.function_of(n) != fn.name or not k.live(n) or _is_write_target(n):
                    continue
                base = n.child_by_field_name("argument")
                if n.type == "pointer_expression" and base is not None:
                    root = _root_ident(base)
                    addr = k.tree.text_of(base)
                else:
                    arr, idx = n.child_by_field_name("argument"), n.child_by_field_name("indices")
                    if arr is None or idx is None:
                        continue
                    root = _root_ident(arr)
                    inner = k.tree.text_of(idx)[1:-1].strip()
                    addr = f"{k.tree.text_of(arr)} + {_paren(inner)}"
                if root in consts:
                    call = f"{intrinsic}({addr})"
                    new = k.tree.edit([Edit(n.start_byte, n.end_byte, call)])
                    return Applied(new, self.NAME, f"{fn.name}:{intrinsic}:{squash(addr)}",
                                   before=k.tree.text_of(n), after=call, config={"intrinsic": intrinsic})
        return NotApplicable("no read of a const pointer parameter to route through " + intrinsic)


def _expressions(k: Kernel):
    from klineage.parse.syntax import walk
    return [n for n in walk(k.tree.root) if n.type in ("pointer_expression", "subscript_expression")
            and (n.type != "pointer_expression" or k.tree.text_of(n).startswith("*"))]


def _address(k: Kernel, n) -> str:
    """The address a plain access (`*a`, `p[i]`) reads, as a hint's argument would spell it."""
    if n.type == "pointer_expression":
        return squash(k.tree.text_of(n.child_by_field_name("argument")))
    arr, idx = n.child_by_field_name("argument"), n.child_by_field_name("indices")
    return squash(f"{k.tree.text_of(arr)} + {_paren(k.tree.text_of(idx)[1:-1].strip())}") if arr and idx else ""


def _same_address_elsewhere(k: Kernel, call, addr: str) -> bool:
    """Whether the function of a hinted call accesses its address anywhere else (hinted or plain)."""
    fn = k.function_of(call)
    plain = [n for n in _expressions(k) if k.function_of(n) == fn and _address(k, n).strip("()") == addr.strip("()")]
    hinted = [c for _, (c, _, argv) in _hinted(k) if c != call and k.function_of(c) == fn
              and squash(k.tree.text_of(argv[0])) == addr]
    return bool(plain or hinted)


def _root_ident(n):
    while n is not None and n.type != "identifier":
        n = n.child_by_field_name("left") or n.child_by_field_name("argument") or (
            n.named_children[0] if n.named_children else None)
    return n.text.decode() if n is not None else None


def _is_write_target(n) -> bool:
    p = n.parent
    return p is not None and p.type == "assignment_expression" and p.child_by_field_name("left") == n


FAMILY = Family(
    CacheHint, rank=10,
    forms=(
        Form("a cache-hint intrinsic on a global access: __ldg, __ldcs, __ldcg, __ldca, __ldlu, __ldcv, __stcs, "
             "__stcg, __stwt, __stwb"),
        Form("hand-written PTX loads and stores with a cache operator", rewritable=False),
        Form("a project macro over the intrinsics (#define LDG(p) __ldg(p))", rewritable=False),
    ),
    compiler="global loads and stores carrying the cache operator the source asked for",
    forward=("reoptimize",),
    anchor_query=("(call_expression function: (identifier) @callee (#match? @callee "
                  '"^__(ld|st)(g|cs|cg|ca|lu|cv|wt|wb)$"))'),
    addresses=frozenset({"memory"}),
    rules=("readonly_loads",),
)
