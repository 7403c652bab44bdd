"""Static preconditions: facts of the richer kernel (the one that has the mechanism) that say when the
mechanism is sound, read off its source without running it.

`static_preconditions(source, mechanism, feature)` runs the rules in `RULES` that belong to
`mechanism` (every rule for a mechanism no rule and no detector knows, e.g. one an LLM named) over
the code near the feature: the functions its lines fall in ("core"), those plus every function that
calls them ("extended": a cast feeding a vector load often sits in the caller), and for guards those
plus their direct callees ("context": a head/tail split is often a helper). Without a feature the
whole kernel is in scope. Code in comments and in `#if` branches the preprocessor removes is ignored.

Each precondition is a dict: category (one of the five), condition, fails_without, evidence
("static: <fact> at lines a-b"), lines [first, last] (1-based, in `source`), kernel (sha256[:12] of
`source`), probe (a probe kind in `PROBES` that can violate it, or None).
"""
from __future__ import annotations

import ast
import bisect
import hashlib
import operator
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Callable

from klineage.gate.guard import strip_comments
from klineage.mechanisms.base import Kernel
from klineage.parse import syntax
from klineage.parse.semantics import VECTOR_TYPES

CATEGORIES = ("data_types", "layout", "storage", "pipeline", "hardware")
PROBES = ("misaligned_base", "ragged_size", "large_magnitude", "tiny_size")
KIB = 1024

# Shared memory per block, from the CUDA C++ Programming Guide's per-arch figures (technical
# specifications per compute capability): a static `__shared__` allocation is limited to 48 KiB;
# dynamic shared memory above 48 KiB needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize), up to
# the opt-in maximum below.
SMEM_STATIC_LIMIT = 48 * KIB
SMEM_OPTIN_MAX = {"sm_80": 163 * KIB, "sm_86": 99 * KIB, "sm_89": 99 * KIB, "sm_90": 227 * KIB,
                  "sm_100": 227 * KIB, "sm_120": 99 * KIB}
# Observed, not in the guide: ptxas (nvcc 13.0) accepts static shared memory up to the opt-in
# maximum for the arch-specific sm_90a target ("0x38c00 max"; 0xc000 for sm_90 and the others), and
# an H200 launches a 227 KiB static kernel built for sm_90a without any attribute.
SMEM_STATIC_LIMIT_BY_TARGET = {"sm_90a": 227 * KIB}
SMEM_TARGETS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_120")

ELEMENT_BYTES = {"float": 4, "double": 8, "int": 4, "unsigned int": 4, "unsigned": 4, "uint32_t": 4,
                 "int32_t": 4, "int64_t": 8, "uint64_t": 8, "long long": 8, "unsigned long long": 8, "short": 2,
                 "unsigned short": 2, "int16_t": 2,
                 "uint16_t": 2, "char": 1, "signed char": 1, "unsigned char": 1, "int8_t": 1, "uint8_t": 1,
                 "__half": 2, "half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2, "__nv_fp8_e4m3": 1,
                 "__nv_fp8_e5m2": 1}


def kernel_id(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:12]


def span(lines) -> str:
    """'lines 88-88, 120-121' for sorted (first, last) pairs or plain line numbers."""
    pairs = sorted({(x, x) if isinstance(x, int) else tuple(x) for x in lines})
    return "lines " + ", ".join(f"{a}-{b}" for a, b in pairs)


# ---------------------------------------------------------------------------------------------
# The source, its functions and reference graph, and the region around a feature
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fn:
    name: str
    first: int
    last: int
    space: str  # global | device | host

    @property
    def lines(self) -> set[int]:
        return set(range(self.first, self.last + 1))


class Src:
    """One richer kernel: code with comments and strings blanked, asm strings, dead lines, functions,
    macros and which function references which."""

    def __init__(self, source: str):
        self.source = source
        self.k = Kernel(source)
        self.sem = self.k.sem
        self.tree = self.k.tree
        self.code, strings = strip_comments(source)
        self.code_lines = self.code.splitlines()
        self.n_lines = len(source.splitlines())
        self.strings = strings  # (line, text) of every string literal: inline asm lives here
        self.hash = kernel_id(source)
        self._nl = [i for i, c in enumerate(self.code) if c == "\n"]

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self._nl, offset - 1) + 1

    def text(self, line: int) -> str:
        return self.source.splitlines()[line - 1].strip() if 0 < line <= self.n_lines else ""

    @cached_property
    def dead(self) -> set[int]:
        """Lines of statements inside `#if` branches that the preprocessor removes (libclang saw no
        node on any of their lines)."""
        dead: set[int] = set()
        for n in syntax.walk(self.tree.root):
            if n.type not in ("preproc_if", "preproc_ifdef", "preproc_elif", "preproc_else", "preproc_elifdef"):
                continue
            skip = {id(n.child_by_field_name(f)) for f in ("condition", "name", "alternative")}
            for c in n.named_children:
                if id(c) in skip or c.type.startswith("preproc") or c.type == "comment":
                    continue
                a, b = c.start_point.row + 1, c.end_point.row + 1
                if not any(self.sem.is_live(x) for x in range(a, b + 1)):
                    dead.update(range(a, b + 1))
        return dead

    @cached_property
    def functions(self) -> list[Fn]:
        return [Fn(f.name, f.lines[0], f.lines[1], f.space) for f in self.sem.functions]

    def fn_at(self, line: int) -> Fn | None:
        hits = [f for f in self.functions if f.first <= line <= f.last]
        return min(hits, key=lambda f: f.last - f.first) if hits else None

    def fn_code(self, f: Fn) -> str:
        return "\n".join(self.code_lines[f.first - 1:f.last])

    @cached_property
    def refs(self) -> dict[str, set[str]]:
        """Function name -> names of the (other) functions its code mentions (calls, launches, aliases)."""
        names = {f.name for f in self.functions}
        # macros that expand to a call (`#define RS_LOAD4(p) rs_load4(p)`) reference what they expand to
        body = {m: set(re.findall(r"[A-Za-z_]\w*", v)) for m, v in self.macro_bodies.items()}

        def expand(words: set[str], depth: int = 0) -> set[str]:
            more = set().union(*(body[w] for w in words if w in body)) - words if depth < 6 else set()
            return words | (expand(words | more, depth + 1) if more else set())
        out: dict[str, set[str]] = {}
        for f in self.functions:
            words = expand(set(re.findall(r"[A-Za-z_]\w*", self.fn_code(f))))
            out.setdefault(f.name, set()).update((words & names) - {f.name})
        return out

    @cached_property
    def macro_bodies(self) -> dict[str, str]:
        """Every live #define (object- or function-like) -> its replacement text."""
        out: dict[str, str] = {}
        for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(?:\([^)]*\))?[ \t]*([^\n]*)$", self.code, re.M):
            if self.line_of(m.start()) not in self.dead:
                out.setdefault(m.group(1), m.group(2).strip())
        return out

    def callers(self, names: set[str]) -> set[str]:
        """Functions that reach any of `names` through references, transitively."""
        found, frontier = set(), set(names)
        while frontier:
            new = {g for g, rs in self.refs.items() if rs & frontier} - found - names
            found |= new
            frontier = new
        return found

    def callees(self, names: set[str]) -> set[str]:
        return set().union(*(self.refs.get(n, set()) for n in names)) - set(names) if names else set()

    def lines_of(self, names: set[str]) -> set[int]:
        return set().union(*(f.lines for f in self.functions if f.name in names)) if names else set()

    @cached_property
    def macros(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n]+)$", self.code, re.M):
            if self.line_of(m.start()) not in self.dead:
                out.setdefault(m.group(1), m.group(2).strip())
        for m in re.finditer(r"\b(?:static\s+)?constexpr\s+[\w:<>\s]+?\s([A-Za-z_]\w*)\s*=\s*([^;]+);", self.code):
            out.setdefault(m.group(1), m.group(2).strip())
        return out

    def value(self, expr: str, depth: int = 0) -> int | None:
        """Integer value of `expr` with macros and constexprs expanded, or None."""
        if depth > 8:
            return None
        text = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", expr.strip())
        text = re.sub(r"\((?:unsigned|int|int64_t|size_t|unsigned int|long)\)", "", text)

        def sub(m):
            v = self.value(self.macros[m.group(0)], depth + 1) if m.group(0) in self.macros else None
            return str(v) if v is not None else m.group(0)
        text = re.sub(r"[A-Za-z_]\w*", sub, text)
        return _eval_int(text)

    def template_params(self, name: str) -> list[str]:
        for fn in syntax.functions(self.tree):
            if syntax.function_name(fn) == name and fn.parent is not None and fn.parent.type == "template_declaration":
                params = fn.parent.child_by_field_name("parameters")
                return re.findall(r"(?:int|unsigned|size_t|bool|typename|class|int64_t|long)\s+([A-Za-z_]\w*)",
                                  self.tree.text_of(params))
        return []

    def live(self, line: int) -> bool:
        return line not in self.dead

    def find(self, pattern: str | re.Pattern, lines: set[int] | None) -> list[tuple[int, re.Match]]:
        """Matches of `pattern` in live code (comments and strings blanked) on `lines` (None: all)."""
        pat = re.compile(pattern) if isinstance(pattern, str) else pattern
        out = []
        for m in pat.finditer(self.code):
            ln = self.line_of(m.start())
            if (lines is None or ln in lines) and self.live(ln):
                out.append((ln, m))
        return out

    def find_asm(self, pattern: str, lines: set[int] | None) -> list[tuple[int, str]]:
        pat = re.compile(pattern)
        return [(ln, m.group(0)) for ln, s in self.strings for m in pat.finditer(s)
                if (lines is None or ln in lines) and self.live(ln)]


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Div: operator.floordiv, ast.Mod: operator.mod, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
        ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor}


def _eval_int(text: str) -> int | None:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return None

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            return _OPS[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        raise ValueError
    try:
        return ev(tree)
    except (ValueError, ZeroDivisionError, TypeError):
        return None


@dataclass
class Region:
    feature: set[int] | None  # the feature's own lines (None: no feature)
    core: set[int] | None     # None everywhere means the whole kernel
    extended: set[int] | None
    context: set[int] | None
    core_fns: set[str]
    ext_fns: set[str]


def region(src: Src, feature: dict | None) -> Region:
    if not feature or not feature.get("lines"):
        names = {f.name for f in src.functions}
        return Region(None, None, None, None, names, names)
    a, b = feature["lines"][0], feature["lines"][-1]
    own = set(range(a, b + 1))
    core = {f.name for f in src.functions if f.first <= b and a <= f.last}
    if not core:  # file-level feature (a #define, a declaration): the functions that use its names
        words = set(re.findall(r"[A-Za-z_]\w*", "\n".join(src.code_lines[a - 1:b])))
        core = {f.name for f in src.functions if words & set(re.findall(r"[A-Za-z_]\w*", src.fn_code(f)))}
    ext = core | src.callers(core)
    ctx = ext | src.callees(ext)
    return Region(own, own | src.lines_of(core), own | src.lines_of(ext), own | src.lines_of(ctx), core, ext)


def _pre(src: Src, category: str, condition: str, fails_without: str, fact: str, lines: list,
         probe: str | None, evidence: str | None = None) -> dict:
    pairs = sorted({(x, x) if isinstance(x, int) else tuple(x) for x in lines})
    assert category in CATEGORIES and (probe is None or probe in PROBES)
    return {"category": category, "condition": condition, "fails_without": fails_without,
            "evidence": evidence or f"static: {fact} at {span(pairs)}",
            "lines": [pairs[0][0], max(p[1] for p in pairs)], "kernel": src.hash, "probe": probe}


def _names(items, limit: int = 6) -> str:
    items = list(dict.fromkeys(items))
    return ", ".join(items[:limit]) + (f" (+{len(items) - limit} more)" if len(items) > limit else "")


# ---------------------------------------------------------------------------------------------
# Launch facts shared by several rules
# ---------------------------------------------------------------------------------------------

_LAUNCH = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^;{}]*?>)?\s*<<<\s*([^;]*?)>>>")
_BLOCKDIM = re.compile(r"\bblockDim\s*=\s*(?:dim3\s*)?\(?([^;]*?)\)?\s*;")


def _split_args(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([<{":
            depth += 1
        elif ch in ")]>}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def launch_blocks(src: Src, kernels: set[str]) -> list[tuple[int, str]]:
    """(line, block-size expression) of the launches of `kernels` in host code: `k<<<g, b>>>`
    (directly or through a variable holding the kernel), cudaLaunchKernelEx with a config's
    `blockDim = ...`, cudaLaunchCooperativeKernel(k, grid, block, ...)."""
    out = []
    for f in src.functions:
        if f.space != "host" or not src.refs.get(f.name, set()) & kernels:
            continue
        lines = f.lines
        body = src.fn_code(f)
        names = set(kernels)
        for m in re.finditer(r"\b([A-Za-z_]\w*)\s*=\s*&?\s*([A-Za-z_]\w*)\b", body):
            if m.group(2) in kernels:
                names.add(m.group(1))
        for ln, m in src.find(_LAUNCH, lines):
            args = _split_args(m.group(2))
            if m.group(1) in names and len(args) >= 2:
                out.append((ln, args[1]))
        for ln, m in src.find(r"\bcudaLaunchCooperativeKernel\s*\(([^;]*)\)\s*;", lines):
            args = _split_args(m.group(1))
            if len(args) >= 3 and re.sub(r"[&()\s]|\(void\s*\*\)", "", args[0]) in names:
                out.append((ln, args[2]))
        launched_ex = any(re.sub(r"[&\s]", "", _split_args(m.group(1))[1]) in names
                          for _, m in src.find(r"\bcudaLaunchKernelEx\s*\(([^;]*)\)", lines)
                          if len(_split_args(m.group(1))) > 1)
        if launched_ex:
            for ln, m in src.find(_BLOCKDIM, lines):
                out.append((ln, m.group(1).strip()))
    return out


def template_values(src: Src, fn_name: str) -> dict[str, set[int]]:
    """Template parameter -> the integer values it takes at the instantiations in the source."""
    params = src.template_params(fn_name)
    vals: dict[str, set[int]] = {p: set() for p in params}
    for _, m in src.find(rf"\b{re.escape(fn_name)}\s*<([^;{{}}]*?)>", None):
        for p, a in zip(params, _split_args(m.group(1))):
            if (v := src.value(a)) is not None:
                vals[p].add(v)
    return vals


def shape_dependent(src: Src, expr: str, fn: Fn | None, depth: int = 0) -> bool:
    """True when `expr` involves a value known only at run time (a parameter, a computed local)."""
    if depth > 4:
        return True
    fixed = {"dim3", "sizeof", "min", "max", "std", "unsigned", "int", "size_t", "const", "u", "x", "y", "z"}
    body = src.fn_code(fn) if fn else src.code
    for name in set(re.findall(r"(?<![\w.])([A-Za-z_]\w*)", expr)) - fixed:
        if name in src.macros or name.isupper():
            continue
        m = re.search(rf"\b(?:const\s+|constexpr\s+|static\s+)*[\w:<>]+\s+{name}\s*(?:=\s*([^;]+)|\(([^;]*)\)|\{{([^;]*)\}})\s*;",
                      body)
        if m and "constexpr" in m.group(0):
            continue
        if m:
            init = next(g for g in m.groups() if g is not None)
            if not shape_dependent(src, init, fn, depth + 1):
                continue
        return True
    return False


def block_facts(src: Src, kernels: set[str]) -> tuple[list[tuple[int, str, int | None]], bool]:
    """Launch block sizes of `kernels` as (line, expression, value or None), and whether any depends
    on the shape."""
    facts, dep = [], False
    for ln, expr in launch_blocks(src, kernels):
        fn = src.fn_at(ln)
        val = src.value(expr.replace("dim3", "").strip("() "))
        d = val is None and shape_dependent(src, expr, fn)
        dep |= d
        facts.append((ln, expr, val))
    return facts, dep


# ---------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------

_CAST_TEXT = re.compile(r"reinterpret_cast\s*<[^<>]*>|\(\s*(?:const\s+)?\w+\s*(?:const\s*)?\*\s*\)")


def _pointee_of(src: Src, ident: str, line: int) -> str | None:
    fn = src.fn_at(line)
    if fn:
        f = src.sem.function(fn.name)
        for p in (f.params if f else ()):
            if p.name == ident and p.pointee:
                return p.pointee
    best = None
    for (name, ln), t in src.sem.var_types.items():
        if name == ident and ln <= line and (best is None or ln > best[0]):
            best = (ln, t)
    if best and "*" in best[1]:
        return best[1].rsplit("*", 1)[0]
    return None


def _element(pointee: str | None) -> tuple[str, int] | None:
    if not pointee:
        return None
    t = re.sub(r"\b(const|volatile|__restrict__|__restrict)\b", "", pointee).strip()
    return (t, ELEMENT_BYTES[t]) if t in ELEMENT_BYTES else None


def rule_vector_casts(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    casts = [c for c in src.sem.vector_casts if (reg.extended is None or c.line in reg.extended) and src.live(c.line)]
    groups: dict[str, list] = {}
    for c in casts:
        groups.setdefault(c.vector, []).append(c)
    sites: dict[str, list[tuple[int, str, tuple[str, int] | None]]] = {}
    for vec, cs in groups.items():
        for c in cs:
            line = src.code_lines[c.line - 1]
            texts = [re.sub(r"\s*([<>*()])\s*", r"\1", re.sub(r"\s+", " ", m.group(0)))
                     for m in _CAST_TEXT.finditer(line) if re.search(rf"\b{vec.lstrip('_')}\b", m.group(0))]
            text = ", ".join(dict.fromkeys(texts)) or f"cast to {c.to_type}"
            arg = re.search(r"(?:reinterpret_cast\s*<[^<>]*>|\(\s*(?:const\s+)?\w+\s*\*\s*\))\s*\(?\s*([A-Za-z_]\w*)", line)
            elem = _element(_pointee_of(src, arg.group(1), c.line)) if arg else None
            sites.setdefault(vec, []).append((c.line, text, elem))
    if not sites and feature and feature.get("detail", {}).get("vector") in VECTOR_TYPES:
        d = feature["detail"]
        a, b = feature["lines"][0], feature["lines"][-1]
        sites[d["vector"]] = [((a, b), f"{d['vector']} access ({d.get('form', 'deref')})", None)]
    if not sites:  # vector-typed pointer parameters of kernels: the caller made the vectors
        for f in src.sem.kernels():
            if reg.ext_fns is not None and f.name not in reg.ext_fns:
                continue
            for p in f.params:
                vec = p.pointee and next((v for v in VECTOR_TYPES if re.search(rf"\b{v}\b", p.pointee)), None)
                if vec:
                    sites.setdefault(vec, []).append((f.lines[0], f"parameter {p.type} {p.name} of {f.name}", None))
    out = []
    for vec, ss in sites.items():
        elem_t, lanes, nbytes = VECTOR_TYPES[vec]
        elems = {e for _, _, e in ss if e}
        per = None
        if len(elems) == 1:
            (et, eb), = elems
            if nbytes % eb == 0:
                elem_t, per = et, nbytes // eb
        per = per or lanes
        fns = {src.fn_at(x if isinstance(x, int) else x[0]) for x, _, _ in ss} - {None}
        names = {f.name for f in fns}
        # guards live in the function of the cast, a helper it calls, or the host code that dispatches to it
        gl = src.lines_of(names | src.callees(names) | src.callers(names)) or None
        lines = [x for x, _, _ in ss]
        fact = _names(t for _, t, _ in ss)
        align_pat = (rf"(?:\b(?:u?intptr_t|size_t|uint64_t|unsigned long long)\s*\)|reinterpret_cast\s*<\s*u?intptr_t)"
                     rf"[^;]*(?:&\s*(?:{nbytes - 1}|0x{nbytes - 1:x}|0x{nbytes - 1:X})[uU]?\b|%\s*{nbytes}[uU]?\b)"
                     r"|__builtin_assume_aligned|\balignof\s*\(|\bis_aligned\w*\s*\(")
        aguard = src.find(align_pat, gl)
        if aguard:
            ln = aguard[0][0]
            cond = (f"handled in code: the {vec} path depends on a {nbytes}-byte alignment check of the base "
                    f"address (`{src.text(ln)[:80]}` at line {ln}): misaligned pointers are peeled or sent elsewhere")
            afact = f"; alignment check at line {ln}"
        else:
            cond = (f"the base address of every {vec} access is {nbytes}-byte aligned (pointer offsets a "
                    f"multiple of {nbytes} bytes, e.g. no views starting mid-vector)")
            afact = ""
        out.append(_pre(src, "layout", cond,
                        f"a {nbytes}-byte {vec} access at an address not a multiple of {nbytes} faults "
                        "(cudaErrorMisalignedAddress)", fact, lines + ([aguard[0][0]] if aguard else []),
                        "misaligned_base", evidence=f"static: {fact} at {span(lines)}{afact}"))
        size_pat = rf"(?:%\s*{per}|&\s*(?:{per - 1}|0x{per - 1:x}))[uU]?\s*\)*\s*[!=]=\s*0"
        tail_pat = (r"\b\w*(?:tail|remainder|leftover)\w*\b|\brem\b|\b\w+_rem\b"
                    rf"|%\s*{per}[uU]?\b(?!\s*\)*\s*[!=]=)|&\s*~\s*\(?\s*{per - 1}"
                    rf"|\*\s*{per}\s*\+|/\s*{per}\s*\*\s*{per}\b")
        sguard = src.find(size_pat, gl)
        tguard = [] if sguard else src.find(tail_pat, gl)
        if sguard:
            ln = sguard[0][0]
            tguard = sguard
            cond = (f"handled in code: the {vec} path is taken only for sizes divisible by {per} "
                    f"(`{src.text(ln)[:80]}` at line {ln})")
            tfact = f"; size check at line {ln}"
        elif tguard:
            ln = tguard[0][0]
            cond = (f"handled in code: elements past the last whole {vec} ({per} {elem_t} each) are done by "
                    f"scalar code (`{src.text(ln)[:80]}` at line {ln})")
            tfact = f"; scalar remainder at line {ln}"
        else:
            cond = (f"element counts (row length, total size) divisible by {per}: each {vec} carries {per} "
                    f"{elem_t} and no scalar tail is visible")
            tfact = ""
        out.append(_pre(src, "layout", cond,
                        f"the last n % {per} elements are skipped or a {vec} access reads/writes past the end "
                        "of the buffer (wrong results or an illegal address)", fact,
                        lines + ([tguard[0][0]] if tguard else []), "ragged_size",
                        evidence=f"static: {fact} at {span(lines)}{tfact}"))
    return out


_WARP_CALL = re.compile(r"\b(__shfl(?:_xor|_down|_up)?_sync|__ballot_sync|__any_sync|__all_sync|"
                        r"__match_(?:any|all)_sync|__reduce_\w+_sync)\s*\(\s*([^,()]+)")
_FULL = re.compile(r"^(?:0x[fF]{8}[uUlL]*|~0[uUlL]*|-1|~0x0[uU]?|0XFFFFFFFF[uU]?)$")


def _is_full(src: Src, mask: str) -> bool:
    mask = mask.strip()
    if _FULL.match(mask):
        return True
    v = src.value(mask)
    return v is not None and (v & 0xFFFFFFFF) == 0xFFFFFFFF


def _early_exits(src: Src, fn_name: str, before: int) -> list[int]:
    """Lines of `return` under a condition, or lane-dependent branches, before line `before` of `fn_name`."""
    out = []
    for fnode in syntax.functions(src.tree):
        if syntax.function_name(fnode) != fn_name:
            continue
        for n in syntax.walk(fnode):
            if n.type == "return_statement" and n.start_point.row + 1 < before and src.live(n.start_point.row + 1):
                if any(a.type == "if_statement" for a in syntax.ancestors(n) if a.start_byte >= fnode.start_byte):
                    out.append(n.start_point.row + 1)
    return out


def _lane_branch(src: Src, line: int) -> int | None:
    """Line of an `if` on the thread/lane index that encloses `line`, if any."""
    for n in syntax.walk(src.tree.root):
        if n.type == "if_statement" and n.start_point.row + 1 < line <= n.end_point.row + 1:
            cond = n.child_by_field_name("condition")
            cons = n.child_by_field_name("consequence")
            if cons is not None and cons.start_point.row + 1 <= line and cond is not None and \
                    re.search(r"threadIdx|\blane\w*\b|\btid\b", src.tree.text_of(cond)):
                return n.start_point.row + 1
    return None


def rule_warp_masks(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    sites = [(ln, m.group(1)) for ln, m in src.find(_WARP_CALL, reg.core) if _is_full(src, m.group(2))]
    by_fn: dict[str, list] = {}
    for ln, call in sites:
        f = src.fn_at(ln)
        by_fn.setdefault(f.name if f else "<file>", []).append((ln, call))
    out = []
    for fname, ss in by_fn.items():
        chain = {fname} | src.callers({fname})
        kernels = {f.name for f in src.functions if f.name in chain and f.space == "global"}
        notes, probe, lines = [], None, [ln for ln, _ in ss]
        exits = _early_exits(src, fname, min(lines))
        for g in chain - {fname}:
            calls = [ln for ln, _ in src.find(r"\b(?:" + "|".join(map(re.escape, src.refs[g] & chain)) + r")\b",
                                                   src.lines_of({g}))] if src.refs.get(g, set()) & chain else []
            if calls and src.sem.function(g) and src.sem.function(g).space != "host":
                exits += _early_exits(src, g, min(calls))
        branch = [b for b in (_lane_branch(src, ln) for ln in lines) if b]
        if exits or branch:
            probe = "ragged_size"
            notes.append(f"lanes may leave before the call (line {_names(str(x) for x in sorted(set(exits + branch)))}): "
                         "the shape must keep whole warps active")
            lines += exits + branch
        facts, dep = block_facts(src, kernels)
        vals = sorted({v for _, _, v in facts if v is not None})
        bad = [v for v in vals if v % 32]
        if dep:
            probe = "ragged_size"
            notes.append("the launch block size depends on the shape ("
                         + _names(f"`{e}` at line {ln}" for ln, e, v in facts if v is None) + ")")
        elif bad:
            notes.append(f"violated statically: a launch uses {bad[0]} threads per block")
        elif vals:
            notes.append(f"launch block sizes {', '.join(map(str, vals))} are multiples of 32")
        calls = _names(c for _, c in ss)
        cond = (f"blockDim a multiple of 32 and all 32 lanes of each warp reach {calls} with the full mask "
                f"0xffffffff in {fname}" + ("; " + "; ".join(notes) if notes else ""))
        out.append(_pre(src, "pipeline", cond,
                        "a full-mask warp collective with exited or inactive lanes is undefined: garbage partial "
                        "results or a hang", f"{calls}(0xffffffff, ...) in {fname}", lines, probe))
    return out


def _fits(static: int, dynamic: int = 0) -> list[str]:
    out = []
    for t in SMEM_TARGETS:
        smax = SMEM_STATIC_LIMIT_BY_TARGET.get(t, SMEM_STATIC_LIMIT)
        optin = SMEM_OPTIN_MAX.get(t, SMEM_OPTIN_MAX.get(t.rstrip("a")))
        if static <= smax and static + dynamic <= optin:
            out.append(t)
    return out


def _template_size(src: Src, v) -> tuple[int, str] | None:
    """Bytes of a shared array sized by template parameters, at the largest instantiation in the source."""
    m = re.match(r"^(.*?)((?:\[[^\]]+\])+)$", v.type.strip())
    if not m or not v.function:
        return None
    base = re.sub(r"\b(const|volatile)\b", "", m.group(1)).strip()
    elem = ELEMENT_BYTES.get(base) or (VECTOR_TYPES[base][2] if base in VECTOR_TYPES else None)
    tv = {p: max(vs) for p, vs in template_values(src, v.function).items() if vs}
    if elem is None or not tv:
        return None
    total = elem
    for dim in re.findall(r"\[([^\]]+)\]", m.group(2)):
        n = src.value(re.sub(r"[A-Za-z_]\w*", lambda w: str(tv.get(w.group(0), w.group(0))), dim))
        if n is None:
            return None
        total *= n
    used = [p for p in tv if re.search(rf"\b{p}\b", m.group(2))]
    return total, ", ".join(f"{p} = {tv[p]}" for p in used)


def rule_shared_memory(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    vs = [v for v in src.sem.shared if (reg.extended is None or v.line in reg.extended
                                          or (v.function is None and any(
                                              src.find(rf"\b{re.escape(v.name)}\b", reg.extended))))
          and src.live(v.line)]
    by_fn: dict[str, list] = {}
    for v in vs:
        by_fn.setdefault(v.function or "<file>", []).append(v)
    out = []
    table = ", ".join(f"{t} {SMEM_OPTIN_MAX[t] // KIB} KiB" for t in SMEM_OPTIN_MAX)
    for fname, group in by_fn.items():
        static = [v for v in group if not v.dynamic]
        dynamic = [v for v in group if v.dynamic]
        sizes = {v.name: (v.size_bytes, "") if v.size_bytes is not None else _template_size(src, v) or (None, "")
                 for v in static}
        known = sum(b for b, _ in sizes.values() if b is not None)
        unknown = [f"{v.name} ({v.type})" for v in static if sizes[v.name][0] is None]
        parts = [f"{name} {b} B" + (f" ({how})" if how else "") for name, (b, how) in sizes.items() if b is not None]
        fact = f"__shared__ in {fname}: " + _names(parts + [f"{u} size depends on template parameters" for u in unknown]
                                                   + [f"extern {v.name}[] dynamic" for v in dynamic])
        if static:
            fits = _fits(known)
            s = f"{known} B" + (f" plus {_names(unknown)} sized by template parameters" if unknown else "")
            if known <= SMEM_STATIC_LIMIT:
                cond = (f"static shared memory per block, {s}, fits the 48 KiB static limit on every arch "
                        f"({', '.join(fits)})" + ("; the template-sized arrays must keep the total under it"
                                                  if unknown else ""))
            else:
                cond = (f"static shared memory per block, {s}, exceeds the 48 KiB static limit: it builds only "
                        f"for {', '.join(fits) or 'no arch'} (ptxas accepts up to 227 KiB static for sm_90a only)")
            out.append(_pre(src, "storage", cond,
                            "ptxas rejects the kernel ('uses too much shared data'), or fewer blocks fit an SM",
                            fact, [v.line for v in static], None))
        if dynamic:
            optin = src.find(r"cudaFuncAttributeMaxDynamicSharedMemorySize", None)
            cond = (f"dynamic shared memory (extern __shared__ {', '.join(v.name for v in dynamic)}) is sized at "
                    f"launch, unknown statically: static {known} B + the launch's bytes must be <= 48 KiB, or "
                    f"<= the opt-in maximum per block after cudaFuncSetAttribute(MaxDynamicSharedMemorySize): "
                    f"{table}" + (f" (the opt-in call is at line {optin[0][0]})" if optin else
                                  " (no opt-in call in the source: 48 KiB is the limit)"))
            out.append(_pre(src, "storage", cond,
                            "the launch fails (too many resources requested / invalid argument) when the bytes "
                            "exceed the arch's limit", fact, [v.line for v in dynamic] + ([optin[0][0]] if optin else []),
                            None))
    return out


# dtype-specific intrinsics: (pattern, dtype). `__hadd2`-style math is overloaded for __half2 and
# __nv_bfloat162 (dtype None): the type names in scope decide.
FP16, BF16 = "fp16 (__half / __half2)", "bf16 (__nv_bfloat16 / __nv_bfloat162)"
DTYPE_INTRINSICS = (
    (r"__half2float|__float2half(?:_r[nzdu])?|__floats2half2_rn|__float2half2_rn|__half22float2|"
     r"__float22half2_rn|__halves2half2|__half2half2|__half_as_u?short|__u?short_as_half", FP16),
    (r"__bfloat162float|__float2bfloat16(?:_r[nzdu])?|__floats2bfloat162_rn|__float22bfloat162_rn|"
     r"__bfloat1622float2|__float2bfloat162_rn|__bfloat162bfloat162|__bfloat16_as_u?short|__u?short_as_bfloat16",
     BF16),
    (r"__h(?:add|sub|mul|fma|div|max|min|abs|neg)2?|h2(?:exp|log|sqrt|rsqrt|rcp)|h(?:exp|log|sqrt|rsqrt|rcp)|"
     r"__low2float|__high2float|__low2half|__high2half", None),
    (r"__nv_cvt_\w*fp8\w*|__nv_fp8x?\d?_e[45]m[23]", "fp8 (e4m3 / e5m2)"),
    (r"__dp4a|__dp2a_lo|__dp2a_hi", "int8 packed four to a 32-bit word"),
)


def rule_dtype_intrinsics(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    scope = reg.extended or set(range(1, src.n_lines + 1))
    scope_text = "\n".join(src.code_lines[ln - 1] for ln in sorted(scope) if ln <= len(src.code_lines))
    found: dict[str, list[tuple[int, str]]] = {}
    for pat, dtype in DTYPE_INTRINSICS:
        hits = src.find(rf"\b(?:{pat})\s*\(", reg.extended)
        if not hits:
            continue
        if dtype is None:
            bf = bool(re.search(r"\b(?:__)?nv_bfloat162?\b", scope_text))
            hf = bool(re.search(r"\b(?:__)?half2?\b", scope_text))
            dtype = BF16 if bf and not hf else FP16 if hf and not bf else "fp16 or bf16 (__half2 / __nv_bfloat162)"
        found.setdefault(dtype, []).extend((ln, m.group(0).rstrip("( ")) for ln, m in hits)
    out = []
    for dtype, hits in found.items():
        hits.sort()
        calls = _names(c for _, c in hits)
        out.append(_pre(src, "data_types",
                        f"operands are {dtype}: the carrier computes or converts with {calls}; the entry "
                        "point's tensors must have that dtype",
                        f"another dtype is reinterpreted bit for bit (wrong values); the code does not carry over "
                        f"to other types without rewriting {calls}", calls, [ln for ln, _ in hits], None))
    return out


# Fast-math intrinsics: name -> (condition, fails_without, probe). Error bounds are those of the CUDA
# C++ Programming Guide's table of intrinsic functions (single precision).
FAST_MATH = {
    "__expf": ("fp32 inputs of moderate magnitude: __expf's error is 2 + floor(|1.173 x|) ulp, growing "
               "with |x| (overflow to inf above x ~ 88.7, like expf)",
               "results drift from expf as |x| grows: tolerance failures on large inputs", "large_magnitude"),
    "__exp10f": ("fp32 inputs of moderate magnitude: __exp10f's error is 2 + floor(|2.97 x|) ulp",
                 "results drift from exp10f as |x| grows", "large_magnitude"),
    "__powf": ("fp32 inputs with moderate |y log2 x|: __powf is exp2(y * __log2f(x)) and its error grows "
               "with that product", "results drift from powf for large exponents", "large_magnitude"),
    "__logf": ("positive fp32 inputs; __logf has 2^-21.41 absolute error on [0.5, 2] and 3 ulp elsewhere "
               "(not logf's 1 ulp)", "last-bit differences from logf; NaN or -inf outside the domain", None),
    "__log2f": ("positive fp32 inputs; __log2f has 2^-22 absolute error on [0.5, 2] and 2 ulp elsewhere",
                "last-bit differences from log2f", None),
    "__log10f": ("positive fp32 inputs; __log10f has 2^-24 absolute error on [0.5, 2] and 3 ulp elsewhere",
                 "last-bit differences from log10f", None),
    "__fdividef": ("fp32 denominators with |y| <= 2^126: for 2^126 < |y| < 2^128 __fdividef(x, y) returns 0 "
                   "(NaN when x is inf); 2 ulp otherwise",
                   "quotients with huge denominators come back 0 instead of a tiny value", "large_magnitude"),
    "__sinf": ("fp32 inputs within [-pi, pi]: __sinf has 2^-21.41 absolute error there and no full range "
               "reduction outside it", "large arguments give inaccurate results", "large_magnitude"),
    "__cosf": ("fp32 inputs within [-pi, pi]: __cosf has 2^-21.19 absolute error there and no full range "
               "reduction outside it", "large arguments give inaccurate results", "large_magnitude"),
    "__sincosf": ("fp32 inputs within [-pi, pi] (as __sinf and __cosf)", "large arguments give inaccurate results",
                  "large_magnitude"),
    "__tanf": ("fp32 inputs well inside (-pi/2, pi/2): __tanf is __sinf / __cosf and degrades near the poles "
               "and outside [-pi, pi]", "large arguments give inaccurate results", "large_magnitude"),
    "rsqrtf": ("positive fp32 inputs; rsqrtf has 2 ulp error (not correctly rounded like 1.0f / sqrtf)",
               "last-bit differences from 1/sqrtf; inf for 0, NaN for negatives", None),
    "__frcp_rn": ("fp32 operands; __frcp_rn is IEEE round-to-nearest, so the only condition is the fp32 range "
                  "(1/x of |x| > 2^126 is subnormal)", "none beyond fp32: same value as 1.0f / x", None),
    "__frsqrt_rn": ("positive fp32 operands; __frsqrt_rn is correctly rounded", "none beyond fp32", None),
}


def rule_fast_math(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    want = (feature or {}).get("detail", {}).get("intrinsic")
    names = [want] if want in FAST_MATH else list(FAST_MATH)
    hits = src.find(r"\b(" + "|".join(map(re.escape, names)) + r")\s*\(", reg.core)
    by: dict[str, list[int]] = {}
    for ln, m in hits:
        by.setdefault(m.group(1), []).append(ln)
    out = []
    for name, lines in by.items():
        cond, fails, probe = FAST_MATH[name]
        out.append(_pre(src, "data_types", cond, fails, f"{name}(...)", lines, probe))
    return out


_LB = re.compile(r"__launch_bounds__\s*\(((?:[^()]|\([^()]*\))*)\)\s*([A-Za-z_]\w*)\s*\(")


def rule_launch_bounds(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    out = []
    # read off the source (libclang does not report the attribute on every non-template kernel)
    for ln, m in src.find(_LB, None):
        f = src.sem.function(m.group(2))
        if f is None or (feature and f.name not in reg.core_fns):
            continue
        bounds = re.sub(r"\s+", " ", m.group(1).strip())
        args = _split_args(bounds)
        n_txt = args[0]
        vals = set()
        tvals = template_values(src, f.name)
        if n_txt in tvals:
            vals = tvals[n_txt]
        elif (v := src.value(n_txt)) is not None:
            vals.add(v)
        n_desc = n_txt + (f" = {', '.join(map(str, sorted(vals)))}" if vals and str(min(vals)) != n_txt else "")
        cond = f"every launch of {f.name} uses at most {n_desc} threads per block (blockDim.x*y*z <= {n_txt})"
        if len(args) > 1:
            cond += (f"; ptxas caps registers so {args[1]} blocks of that size fit one SM "
                     "(minBlocksPerMultiprocessor)")
        facts, dep = block_facts(src, {f.name})
        over = [(ln, v) for ln, _, v in facts if v is not None and vals and v > max(vals)]
        if over:
            cond += f"; violated statically: the launch at line {over[0][0]} uses {over[0][1]} threads"
        elif dep:
            cond += "; the launch block size depends on the shape (" + _names(
                f"`{e}` at line {ln}" for ln, e, v in facts if v is None) + ")"
        elif facts:
            cond += "; launch block sizes: " + _names(f"{e} = {v}" if v is not None and e != str(v) else e
                                                      for _, e, v in facts)
        out.append(_pre(src, "pipeline", cond,
                        "a launch with more threads per block fails with cudaErrorLaunchOutOfResources ('too many "
                        "resources requested for launch')" + ("; the register cap can spill to local memory"
                                                              if len(args) > 1 else ""),
                        f"__launch_bounds__({bounds}) on {f.name}", [ln], "ragged_size" if dep else None))
    return out


_BUILTINS = {"threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize"}
_PRAGMA_UNROLL = re.compile(r"#\s*pragma\s+unroll\b\s*(\S*)")
_KEYWORDS = {"int", "unsigned", "long", "short", "char", "const", "auto", "size_t", "int64_t", "int32_t", "uint32_t",
             "uint64_t", "sizeof", "true", "false", "signed", "float", "double", "static_cast", "constexpr"}


def rule_unroll(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    out = []
    for n in syntax.walk(src.tree.root):
        if n.type != "preproc_call":
            continue
        m = _PRAGMA_UNROLL.match(src.tree.text_of(n).strip())
        ln = n.start_point.row + 1
        if not m or m.group(1) == "1" or (reg.core is not None and ln not in (reg.feature or reg.core)):
            continue
        loop = n.next_named_sibling
        while loop is not None and loop.type == "comment":
            loop = loop.next_named_sibling
        if loop is None or loop.type != "for_statement" or not src.live(loop.start_point.row + 1):
            continue
        parts = {f: loop.child_by_field_name(f) for f in ("initializer", "condition", "update")}
        text = {f: src.tree.text_of(p) if p is not None else "" for f, p in parts.items()}
        loop_vars = set(re.findall(r"([A-Za-z_]\w*)\s*=(?!=)", text["initializer"]))
        loop_vars |= set(re.findall(r"([A-Za-z_]\w*)\s*(?:\+\+|--|[-+*/|&^]=|<<=|>>=|=(?!=))", text["update"]))
        loop_vars |= set(re.findall(r"(?:\+\+|--)\s*([A-Za-z_]\w*)", text["update"]))
        fn = src.fn_at(ln)
        tparams = set(src.template_params(fn.name)) if fn else set()
        idents = set(re.findall(r"(?<![\w.])([A-Za-z_]\w*)", " ".join(text.values()))) - _KEYWORDS - loop_vars
        runtime = sorted((i for i in idents if not (i in src.macros or i in tparams or i.isupper())),
                         key=lambda i: (i in _BUILTINS, i))
        if not runtime:
            continue  # compile-time trip count: nothing is assumed
        header = re.sub(r"\s+", " ", src.tree.text_of(loop).split(")")[0] + ")")
        factor = m.group(1)
        cond = (f"the trip count of `{header}` is a runtime value ({', '.join(runtime)}): "
                + (f"the compiler unrolls by {factor} and keeps a remainder loop, so the gain needs trip counts "
                   f"of at least {factor}" if factor else
                   "a full unroll is impossible; the compiler unrolls by a factor of its choice (or not at all)"))
        out.append(_pre(src, "pipeline", cond,
                        "nothing breaks: short trip counts run mostly the remainder (no gain, more code and "
                        "registers)", f"#pragma unroll{' ' + factor if factor else ''} over {header}",
                        [(ln, loop.start_point.row + 1)], "tiny_size"))
    return out


_LOAD_HINT = re.compile(r"\b(__ldg|__ldcs|__ldcg|__ldca|__ldlu|__ldcv)\s*\(")


def _call_arg(code: str, start: int) -> str:
    """The argument text of a call whose '(' ends at `start` (balanced parentheses)."""
    depth, i = 1, start
    while i < len(code) and depth:
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        i += 1
    return re.sub(r"\s+", " ", code[start:i - 1]).strip()
READONLY = {
    "__ldg": ("read-only path (ld.global.nc)", True),
    "ld.global.nc": ("read-only path (ld.global.nc)", True),
    "__ldca": ("cache-all load", False), "__ldcg": ("L2-only load (bypasses L1)", False),
    "__ldcs": ("evict-first streaming load", False), "__ldlu": ("last-use load", False),
    "__ldcv": ("volatile (don't cache) load", False),
}


def rule_readonly_loads(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    scope = reg.feature if reg.feature and src.find(_LOAD_HINT, reg.feature) else reg.core
    hits: dict[str, list] = {}
    for ln, m in src.find(_LOAD_HINT, scope):
        hits.setdefault(m.group(1), []).append((ln, _call_arg(src.code, m.end())))
    for ln, s in src.find_asm(r"ld\.global\.nc[\w.:]*", scope):
        hits.setdefault("ld.global.nc", []).append((ln, "asm operand"))
    out = []
    for name, ss in hits.items():
        what, nc = READONLY[name]
        args = _names(a for _, a in ss)
        written = []
        for f in src.sem.kernels():
            if src.fn_at(ss[0][0]) and src.fn_at(ss[0][0]).name != f.name:
                continue
            for p in f.params:
                if p.pointee and any(re.search(rf"\b{re.escape(p.name)}\b", a) for _, a in ss) and \
                        src.find(rf"\b{re.escape(p.name)}\s*\[[^\]]*\]\s*(?:[-+*/|&^]?=)(?!=)", src.lines_of({f.name})):
                    written.append(p.name)
        if nc:
            cond = (f"the buffers read through {name} ({args}) are not written by any thread of the same kernel "
                    "during the launch (read-only for the kernel's lifetime)")
            fails = "the non-coherent read-only path may return stale data written in the same launch: wrong results"
        else:
            cond = (f"the buffers read through {name} ({what}: {args}) are read-only for the launch and read "
                    "once; the hint is a cache policy, correctness does not depend on it")
            fails = "data that is re-read misses in cache: slower, not wrong"
        if written:
            cond += f"; violated statically: {', '.join(written)} is also written by the kernel"
        out.append(_pre(src, "pipeline", cond, fails, f"{name}({args})", [ln for ln, _ in ss], None))
    return out


def rule_restrict(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    out = []
    for f in src.sem.functions:
        if feature and f.name not in reg.core_fns:
            continue
        rp = [p for p in f.params if p.restrict]
        if not rp:
            continue
        a = f.lines[0]
        body = next((i for i in range(a, f.lines[1] + 1) if "{" in src.code_lines[i - 1]), a)
        lines = [i for i in range(a, body + 1) if re.search(r"__restrict", src.code_lines[i - 1])] or [a]
        outs = [p.name for p in rp if p.pointee and not p.pointee.startswith("const")]
        ins = [p.name for p in rp if p.name not in outs]
        names = ", ".join(p.name for p in rp)
        if len(rp) == 1:
            cond = (f"{names} is the only pointer through which {f.name} touches its buffer (no other argument "
                    "or global aliases it)")
        else:
            cond = (f"the pointers {names} of {f.name} do not alias: inputs ({', '.join(ins) or 'none'}) and "
                    f"outputs ({', '.join(outs) or 'none'}) are distinct, non-overlapping buffers (no in-place call)")
        out.append(_pre(src, "layout", cond,
                        "the compiler may cache or reorder loads across stores through another pointer: an in-place "
                        "or overlapping call gives wrong results", f"__restrict__ on {names} ({f.name})", lines, None))
    return out


# Hardware requirements: (name, code pattern, asm pattern, condition, fails_without, mechanisms).
HARDWARE = (
    ("cluster", r"__cluster_dims__|\bthis_cluster\s*\(|\bcluster_group\b|cudaLaunchAttributeClusterDimension|"
                r"\bmap_shared_rank\b|cudaFuncAttributeNonPortableClusterSizeAllowed",
     r"barrier\.cluster|%cluster_ctarank|\bmapa\.",
     "compute capability 9.0 or newer (sm_90+): thread-block clusters and distributed shared memory",
     "nvcc rejects __cluster_dims__ and the cluster API for older targets; a cluster launch fails on older GPUs",
     {"thread_block_cluster"}),
    ("wgmma", None, r"\bwgmma\.[\w.:]+",
     "the arch-specific sm_90a target only (wgmma exists on sm_90a: not sm_90, sm_80, sm_100 or sm_120)",
     "ptxas: Instruction 'wgmma.*' not supported on .target for every other arch",
     {"tensor_core_mma", "wgmma", "warp_specialization"}),
    ("setmaxnreg", None, r"\bsetmaxnreg\.[\w.]+",
     "an arch-specific target, sm_90a (or sm_100a): setmaxnreg is not in sm_80, sm_90, sm_100 or sm_120",
     "ptxas: Instruction 'setmaxnreg' not supported on .target", {"warp_specialization", "tensor_core_mma"}),
    ("tcgen05", None, r"\btcgen05\.[\w.:]+",
     "the arch-specific sm_100a family (tcgen05 tensor-core instructions)",
     "ptxas rejects tcgen05 for every other target", {"tensor_core_mma"}),
    ("tma", r"\bCUtensorMap\b|\bcuTensorMapEncode\w*|\bcp_async_bulk\w*|cudaTensorMap",
     r"cp\.async\.bulk[\w.:]*|mbarrier\.[\w.:]*expect_tx",
     "compute capability 9.0 or newer (sm_90+): the Tensor Memory Accelerator and bulk async copies",
     "ptxas: Feature 'cp.async.bulk' requires .target sm_90 or higher", {"tma", "warp_specialization", "async_copy"}),
    ("cp.async", r"__pipeline_memcpy_async|\bcuda::memcpy_async|\bcooperative_groups::memcpy_async|\bcg::memcpy_async",
     r"cp\.async\.(?:ca|cg)\.[\w.:]+|cp\.async\.(?:commit_group|wait_group|wait_all)",
     "compute capability 8.0 or newer (sm_80+): asynchronous global-to-shared copies (cp.async)",
     "ptxas: Feature 'cp.async' requires .target sm_80 or higher (the C++ APIs fall back to synchronous copies)",
     {"async_copy", "multistage_buffer"}),
    ("mma.sync", None, r"\bmma\.sync\.aligned\.m16n8k16[\w.]*|\bldmatrix\.[\w.:]+",
     "compute capability 8.0 or newer for m16n8k16 mma.sync (sm_75+ for ldmatrix)",
     "ptxas rejects the instruction for older targets", {"tensor_core_mma"}),
    ("warp reduce", r"\b__reduce_(?:add|min|max|and|or|xor)_sync\s*\(", None,
     "compute capability 8.0 or newer (sm_80+): __reduce_*_sync warp reductions",
     "nvcc: identifier '__reduce_*_sync' is undefined for older targets", {"warp_reduction"}),
)


def rule_hardware(src: Src, reg: Region, feature: dict | None, mechanism: str) -> list[dict]:
    out = []
    for name, code_pat, asm_pat, cond, fails, mechs in HARDWARE:
        if mechanism in known_mechanisms() and mechanism not in mechs:
            continue
        sites = [(ln, re.sub(r"\s*\($", "", m.group(0))) for ln, m in (src.find(code_pat, reg.core) if code_pat else [])]
        sites += src.find_asm(asm_pat, reg.core) if asm_pat else []
        if not sites:
            continue
        by: dict[str, list[int]] = {}
        for ln, t in sites:
            by.setdefault(t, []).append(ln)
        fact = "; ".join(f"{t} at {span(ls)}" for t, ls in by.items())
        lines = sorted({ln for ln, _ in sites})
        out.append(_pre(src, "hardware", cond, fails, fact, lines, None, evidence=f"static: {fact}"))
    return out


@dataclass(frozen=True)
class Rule:
    name: str
    mechanisms: frozenset[str]
    run: Callable[[Src, Region, dict | None, str], list[dict]]


RULES = (
    Rule("vector_cast", frozenset({"vector_access"}), rule_vector_casts),
    Rule("warp_mask", frozenset({"warp_reduction", "warp_per_row", "online_softmax"}), rule_warp_masks),
    Rule("shared_memory", frozenset({"smem_staging", "smem_padding", "smem_swizzle", "block_per_row", "warp_per_row",
                                     "tiled_transpose", "multistage_buffer", "async_copy", "tma", "wgmma"}),
         rule_shared_memory),
    Rule("dtype_intrinsics", frozenset({"vector_access", "fast_math", "warp_reduction", "tensor_core_mma", "wgmma",
                                        "smem_staging", "online_softmax"}), rule_dtype_intrinsics),
    Rule("fast_math", frozenset({"fast_math", "online_softmax"}), rule_fast_math),
    Rule("launch_bounds", frozenset({"launch_bounds"}), rule_launch_bounds),
    Rule("unroll", frozenset({"unroll"}), rule_unroll),
    Rule("readonly_loads", frozenset({"cache_hint"}), rule_readonly_loads),
    Rule("restrict", frozenset({"restrict"}), rule_restrict),
    Rule("hardware", frozenset().union(*(h[5] for h in HARDWARE)), rule_hardware),
)


@lru_cache(maxsize=1)
def known_mechanisms() -> frozenset[str]:
    """Mechanisms some rule or detector knows; any other name gets every rule."""
    from klineage.mechanisms import registry
    return frozenset(registry()) | frozenset().union(*(r.mechanisms for r in RULES))


def static_preconditions(source: str, mechanism: str, feature: dict | None = None) -> list[dict]:
    """Static preconditions of `mechanism` in `source` (the richer kernel), near `feature` (a
    Feature.to_dict()) when given, else over the whole kernel. A mechanism that neither a rule nor a
    detector knows gets every rule."""
    src = Src(source)
    reg = region(src, feature)
    out, seen = [], set()
    for rule in RULES:
        if mechanism in known_mechanisms() and mechanism not in rule.mechanisms:
            continue
        for d in rule.run(src, reg, feature, mechanism):
            key = (d["category"], d["condition"], tuple(d["lines"]))
            if key not in seen:
                seen.add(key)
                out.append(d)
    return out
