"""The source a static rule reads, and the facts several rules share: its live lines, functions and
reference graph, the region around a feature, the precondition record, and launch facts."""
from __future__ import annotations

import ast
import bisect
import hashlib
import operator
import re
from dataclasses import dataclass
from functools import cached_property

from klineage.parse.kernel import Kernel
from klineage.parse import syntax
from klineage.parse.text import split_top_level, strip_comments

CATEGORIES = ("data_types", "layout", "storage", "pipeline", "hardware")
PROBES = ("misaligned_base", "ragged_size", "large_magnitude", "tiny_size")

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


_LAUNCH_CONFIG = re.compile(r"\b(gridDim|blockDim)\s*=\s*([^;]*?)\s*;")


def launch_shapes(source: str) -> list[tuple[str, str]]:
    """(grid, block) of each launch the host code writes, in file order, whitespace dropped: the
    first two arguments of `k<<<grid, block, ...>>>` (a plain variable replaced by its last definition
    before the launch: `dim3 grid(n / 4)`, `int threads = 256`), and a launch configuration's
    `gridDim = ...` / `blockDim = ...` (cudaLaunchKernelEx). What a version changes when it reshapes
    its launch."""
    code, _ = strip_comments(source)
    flat = lambda t: "".join(t.split())  # noqa: E731

    def resolve(arg: str, at: int) -> str:
        if not re.fullmatch(r"[A-Za-z_]\w*", arg):
            return flat(arg)
        defs = list(re.finditer(rf"\b(?:dim3|(?:const\s+)?(?:unsigned\s+)?(?:int|long|size_t|auto))\s+{arg}\s*"
                                rf"(?:\(([^;]*)\)|=\s*([^;]*)|\{{([^;]*)\}})\s*;", code[:at]))
        if not defs:
            return arg
        d = defs[-1]
        return flat(next(g for g in d.groups() if g is not None))

    out = []
    for m in _LAUNCH.finditer(code):
        args = split_top_level(m.group(2))
        if len(args) >= 2:
            out.append((resolve(args[0], m.start()), resolve(args[1], m.start())))
    configs = [(k, flat(v)) for k, v in _LAUNCH_CONFIG.findall(code)]
    grids, blocks = [v for k, v in configs if k == "gridDim"], [v for k, v in configs if k == "blockDim"]
    out += list(zip(grids, blocks))
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
            args = split_top_level(m.group(2))
            if m.group(1) in names and len(args) >= 2:
                out.append((ln, args[1]))
        for ln, m in src.find(r"\bcudaLaunchCooperativeKernel\s*\(([^;]*)\)\s*;", lines):
            args = split_top_level(m.group(1))
            if len(args) >= 3 and re.sub(r"[&()\s]|\(void\s*\*\)", "", args[0]) in names:
                out.append((ln, args[2]))
        launched_ex = any(re.sub(r"[&\s]", "", split_top_level(m.group(1))[1]) in names
                          for _, m in src.find(r"\bcudaLaunchKernelEx\s*\(([^;]*)\)", lines)
                          if len(split_top_level(m.group(1))) > 1)
        if launched_ex:
            for ln, m in src.find(_BLOCKDIM, lines):
                out.append((ln, m.group(1).strip()))
    return out


def template_values(src: Src, fn_name: str) -> dict[str, set[int]]:
    """Template parameter -> the integer values it takes at the instantiations in the source."""
    params = src.template_params(fn_name)
    vals: dict[str, set[int]] = {p: set() for p in params}
    for _, m in src.find(rf"\b{re.escape(fn_name)}\s*<([^;{{}}]*?)>", None):
        for p, a in zip(params, split_top_level(m.group(1))):
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
