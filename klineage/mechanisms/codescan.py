"""Source facts the structural detectors share, computed once per kernel.

- live code lines: comments blanked; a line counts as live when libclang starts a node on it or the
  statement around it is live, so the continuation lines of a multi-line `asm volatile(...)` (where
  the PTX of wgmma, cp.async and mbarriers sits) count, and `#if`-dead branches do not, except the
  branches of `#if __CUDA_ARCH__ ...` (libclang reads the host pass, where all of them are dead);
- macros: a line that invokes a macro is searched together with the macro's body (three levels
  deep), so `CP_ASYNC_CG(dst, src)` shows the `cp.async.cg` it expands to;
- integer constants (`#define`, `constexpr`/`const` integers, `static constexpr` members, enumerators,
  defaulted template parameters), evaluated where their expression only uses other constants;
- per function: the in-file functions it calls, and the categories of operations (MMA, copies, ...)
  it performs itself or through those calls;
- loops with their effective bodies: tree-sitter-cuda ends a brace-less `for` whose body follows a
  `#pragma unroll` line with an empty statement; the body is then the next statement.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Iterator

from klineage.mechanisms.base import Kernel
from klineage.parse.syntax import ancestors, function_name, functions, walk

# Operation categories a function performs (its own live code, macros expanded), by pattern.
CATEGORIES = {
    "wgmma": r"\bwgmma\.mma_async",
    "mma": r"\bmma\.(?:sync|sp)\b|\bwmma::mma_sync\s*\(|\bmma_sync\s*\(",
    "tma_copy": r"\bcp\.async\.bulk(?:\.tensor\.\dd)?\.shared|\bcp_async_bulk_tensor_\dd_global_to_shared\s*\(|"
                r"\bmemcpy_async_tx\s*\(",  # bulk copies into shared memory (not TMA stores)
    "cp_async": r"\bcp\.async\.c[ag]\b|\b__pipeline_memcpy_async\s*\(|\bmemcpy_async\s*\(",
    "expect_tx": r"\bexpect_tx\b|\bbarrier_arrive_tx\s*\(",
    "exp": r"\bex2\.approx|\b(?:__expf|expf|exp2f|exp2|exp|hexp2?|h2exp2?)\s*\(",
}
_CATEGORY_PATTERNS = {c: re.compile(p) for c, p in CATEGORIES.items()}
COPY_CATEGORIES = frozenset({"tma_copy", "cp_async", "expect_tx"})
MMA_CATEGORIES = frozenset({"wgmma", "mma"})

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_INT_SUFFIX = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)(?:[uU](?:ll|LL|l|L)?|(?:ll|LL|l|L)[uU]?)\b")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_LOOPS = ("for_statement", "for_range_loop", "while_statement", "do_statement")


@dataclass
class Fn:
    name: str
    node: object
    first: int
    last: int
    calls: set = field(default_factory=set)       # names of in-file functions it calls
    own: set = field(default_factory=set)         # categories of its own live code
    cats: set = field(default_factory=set)        # own + those of the functions it calls, transitively


@dataclass
class Loop:
    node: object
    body: object       # the effective body
    var: str | None    # induction variable of a counted `for`

    @property
    def end_byte(self) -> int:
        return self.body.end_byte


class Scan:
    def __init__(self, k: Kernel):
        self.k = k
        self.tree = k.tree
        self.raw_lines = k.source.splitlines()
        self.code_lines = _blank_comments(k).splitlines()
        self._live: dict[int, bool] = {}
        self._tvals: dict[str, dict[str, int]] = {}
        self._expanded: dict[int, str] = {}
        self._loops: dict[int, list[Loop]] = {}
        self.memo: dict = {}  # per-kernel results the detectors share (e.g. accumulator parameters)
        self.macros = self._macros()
        self.consts = self._consts()
        self.fns = [Fn(function_name(f), f, f.start_point.row + 1, f.end_point.row + 1)
                    for f in functions(self.tree)]
        self.by_name: dict[str, list[Fn]] = {}
        for f in self.fns:
            self.by_name.setdefault(f.name, []).append(f)
        self._summarise()

    # ---- lines ------------------------------------------------------------------------------
    def code(self, line: int) -> str:
        return self.code_lines[line - 1] if 0 < line <= len(self.code_lines) else ""

    def live(self, line: int) -> bool:
        """A line of live code: libclang starts a node on it, or it continues a live statement."""
        if line not in self._live:
            self._live[line] = self._is_live(line)
        return self._live[line]

    def _is_live(self, line: int) -> bool:
        sem = self.k.sem
        if sem.is_live(line):
            return True
        text = self.raw_lines[line - 1] if 0 < line <= len(self.raw_lines) else ""
        if not text.strip():
            return False
        col = len(text.encode()) - len(text.lstrip().encode())
        node = self.tree.root.descendant_for_point_range((line - 1, col), (line - 1, col))
        for n in [node, *ancestors(node)] if node is not None else []:
            t = n.type
            if t.startswith("preproc_") or t in ("function_definition", "translation_unit", "compound_statement"):
                return False
            if t.endswith("_statement") or t.endswith("declaration") or t in ("for_range_loop", "enumerator"):
                return any(sem.is_live(i) for i in range(n.start_point.row + 1, n.end_point.row + 2)) or \
                    _arch_guarded(n)
        return False

    def expanded(self, line: int) -> str:
        """The code of `line` followed by the bodies of the macros it invokes (three levels)."""
        if line not in self._expanded:
            self._expanded[line] = self._expand(line)
        return self._expanded[line]

    def _expand(self, line: int) -> str:
        text = self.code(line)
        if not self.macros:
            return text
        out, seen, frontier = [text], set(), text
        for _ in range(3):
            bodies = [self.macros[w] for w in set(_IDENT.findall(frontier)) if w in self.macros and w not in seen]
            seen |= {w for w in _IDENT.findall(frontier) if w in self.macros}
            if not bodies:
                break
            frontier = " ".join(bodies)
            out.append(frontier)
        return " ".join(out)

    def lines(self, fn: Fn | None = None) -> Iterator[int]:
        """Live lines of `fn` (or of the whole file)."""
        a, b = (fn.first, fn.last) if fn else (1, len(self.code_lines))
        return (i for i in range(a, b + 1) if self.live(i))

    def find(self, fn: Fn | None, pattern: str | re.Pattern) -> list[tuple[int, re.Match]]:
        """(line, match) of `pattern` on the live lines of `fn` (macros expanded)."""
        pat = re.compile(pattern) if isinstance(pattern, str) else pattern
        out = []
        for i in self.lines(fn):
            out += [(i, m) for m in pat.finditer(self.expanded(i))]
        return out

    def outside_functions(self) -> Iterator[int]:
        covered = [(f.first, f.last) for f in self.fns]
        return (i for i in range(1, len(self.code_lines) + 1) if not any(a <= i <= b for a, b in covered))

    # ---- macros and constants ---------------------------------------------------------------
    def _macros(self) -> dict[str, str]:
        out = {}
        for n in walk(self.tree.root):
            if n.type in ("preproc_def", "preproc_function_def"):
                name, value = n.child_by_field_name("name"), n.child_by_field_name("value")
                if name is not None and value is not None:
                    out[self.tree.text_of(name)] = _COMMENT.sub(" ", self.tree.text_of(value)).replace("\\\n", " ")
        return out

    def _consts(self) -> dict[str, int]:
        exprs: dict[str, set[str]] = {}

        def add(name_node, value_node):
            if name_node is not None and value_node is not None:
                exprs.setdefault(self.tree.text_of(name_node), set()).add(self.tree.text_of(value_node))

        for name, body in self.macros.items():
            exprs.setdefault(name, set()).add(body.strip())
        for n in walk(self.tree.root):
            if n.type == "enumerator" or n.type == "optional_parameter_declaration":
                add(n.child_by_field_name("name") or n.child_by_field_name("declarator"),
                    n.child_by_field_name("value") or n.child_by_field_name("default_value"))
            elif n.type in ("declaration", "field_declaration"):
                quals = {c.text.decode() for c in n.children if c.type == "type_qualifier"}
                if not quals & {"const", "constexpr"}:
                    continue
                if n.type == "field_declaration":
                    d = n.child_by_field_name("declarator")
                    add(d, n.child_by_field_name("default_value"))
                for d in n.children_by_field_name("declarator"):
                    if d.type == "init_declarator":
                        add(d.child_by_field_name("declarator"), d.child_by_field_name("value"))
        out: dict[str, int] = {}
        for _ in range(4):  # constants defined through other constants
            for name, texts in exprs.items():
                if name in out:
                    continue
                vals = {v for v in (evaluate(t, out) for t in texts) if v is not None}
                if len(vals) == 1:
                    out[name] = vals.pop()
        return out

    def value(self, text: str, fn: Fn | None = None) -> int | None:
        return evaluate(text, {**self.consts, **self.template_values(fn)} if fn is not None else self.consts)

    def template_values(self, fn: Fn) -> dict[str, int]:
        """Values of `fn`'s template parameters where the file instantiates it one way only
        (`gemm<128, 3><<<...>>>`), else their defaults."""
        if fn.name in self._tvals:
            return self._tvals[fn.name]
        out: dict[str, int] = {}
        decl = fn.node.parent
        params = decl.child_by_field_name("parameters") if decl is not None and decl.type == "template_declaration" \
            else None
        if params is not None:
            names = []
            for p in params.named_children:
                d = p.child_by_field_name("declarator") or p.child_by_field_name("name")
                names.append(self.tree.text_of(d) if d is not None else "")
            insts = {tuple(self.tree.text_of(a) for a in n.child_by_field_name("arguments").named_children)
                     for n in walk(self.tree.root) if n.type == "template_function"
                     and n.child_by_field_name("arguments") is not None
                     and self.tree.text_of(n.child_by_field_name("name")) == fn.name}
            if len(insts) == 1:
                for name, text in zip(names, insts.pop()):
                    v = evaluate(text, self.consts)
                    if name and v is not None:
                        out[name] = v
        self._tvals[fn.name] = out
        return out

    # ---- functions --------------------------------------------------------------------------
    def fn_of(self, node) -> Fn | None:
        """The innermost function definition around `node`."""
        around = [f for f in self.fns if f.node.start_byte <= node.start_byte and node.end_byte <= f.node.end_byte]
        return min(around, key=lambda f: f.node.end_byte - f.node.start_byte) if around else None

    def _summarise(self) -> None:
        for f in self.fns:
            text = " ".join(self.expanded(i) for i in self.lines(f))
            f.own = {c for c, p in _CATEGORY_PATTERNS.items() if p.search(text)}
            f.calls = {c for c in (callee_name(n) for n in walk(f.node) if n.type == "call_expression")
                       if c in self.by_name}
            f.cats = set(f.own)
        for _ in range(6):
            changed = False
            for f in self.fns:
                more = set().union(*[g.cats for c in f.calls for g in self.by_name[c]]) - f.cats
                if more:
                    f.cats |= more
                    changed = True
            if not changed:
                break

    def cats_of(self, node) -> set[str]:
        """Categories of the live code under `node`, its calls followed."""
        a, b = node.start_point.row + 1, node.end_point.row + 1
        text = " ".join(self.expanded(i) for i in range(a, b + 1) if self.live(i))
        out = {c for c, p in _CATEGORY_PATTERNS.items() if p.search(text)}
        for n in walk(node):
            if n.type == "call_expression":
                for g in self.by_name.get(callee_name(n), []):
                    out |= g.cats
        return out

    # ---- loops ------------------------------------------------------------------------------
    def loops(self, fn: Fn) -> list[Loop]:
        key = fn.node.start_byte
        if key not in self._loops:
            self._loops[key] = self._find_loops(fn)
        return self._loops[key]

    def _find_loops(self, fn: Fn) -> list[Loop]:
        out = []
        for n in walk(fn.node):
            if n.type not in _LOOPS:
                continue
            body = n.child_by_field_name("body")
            if body is None:
                continue
            if body.type == "expression_statement" and body.end_byte == body.start_byte or \
                    (body.type == "expression_statement" and all(c.is_missing for c in body.children)):
                nxt = n.next_named_sibling
                while nxt is not None and (nxt.type.startswith("preproc_") or nxt.type == "comment"):
                    nxt = nxt.next_named_sibling
                body = nxt if nxt is not None else body
            out.append(Loop(n, body, _induction_var(n)))
        return out

    def enclosing_loops(self, fn: Fn, node) -> list[Loop]:
        return [lp for lp in self.loops(fn)
                if lp.body.start_byte <= node.start_byte and node.end_byte <= lp.body.end_byte]


def scan(k: Kernel) -> Scan:
    """The kernel's scan, made once and kept on the kernel: it lives exactly as long as the kernel (a
    table keyed by kernel would keep every kernel, and its syntax tree, alive through the scan's own
    reference to it)."""
    s = k.__dict__.get("_codescan")
    if s is None:
        s = k.__dict__["_codescan"] = Scan(k)
    return s


# ---- hand-written PTX and macros ---------------------------------------------------------------

@dataclass(frozen=True)
class AsmOp:
    function: str
    node: object        # the gnu_asm_expression
    opcode: str         # one PTX instruction of its template, e.g. "ld.global.cs.v4.f32"


_PTX_OP = re.compile(r"(?:^|[;{}\n]|\\n)\s*(?:@!?%?\w+\s+)?([a-z][a-z0-9_]*(?:\.[\w:]+)+)")


def asm_ops(k: Kernel) -> list[AsmOp]:
    """The PTX instructions of every live `asm(...)` statement in a function (its template strings
    joined, macros not involved), in source order."""
    out = []
    s = scan(k)
    for n in walk(k.tree.root):
        if n.type != "gnu_asm_expression" or not s.live(n.start_point.row + 1):
            continue
        fn = s.fn_of(n)
        if fn is None:
            continue
        text = "".join(_string_text(c) for c in n.children if c.type in ("string_literal", "concatenated_string"))
        for m in _PTX_OP.finditer(text):
            out.append(AsmOp(fn.name, n, m.group(1)))
    return out


def _string_text(node) -> str:
    if node.type == "concatenated_string":
        return "".join(_string_text(c) for c in node.named_children)
    return node.text.decode()[1:-1] if node.type == "string_literal" else ""


def macro_calls(k: Kernel, pattern: str | re.Pattern) -> list[tuple[str, object, str, re.Match]]:
    """(function, call node, macro name, match) for live calls of a function-like macro whose body
    (macros in it expanded, three levels) matches `pattern`."""
    s = scan(k)
    pat = re.compile(pattern) if isinstance(pattern, str) else pattern
    hits = {}
    every = _all_definitions(k)
    for name in s.macros:
        body = " ".join(every.get(name, [s.macros[name]]))
        seen, frontier = {name}, body
        for _ in range(3):
            more = [s.macros[w] for w in set(_IDENT.findall(frontier)) if w in s.macros and w not in seen]
            seen |= set(_IDENT.findall(frontier)) & set(s.macros)
            if not more:
                break
            frontier = " ".join(more)
            body += " " + frontier
        m = pat.search(body)
        if m:
            hits[name] = m
    if not hits:
        return []
    out = []
    for n in walk(k.tree.root):
        name = callee_name(n) if n.type == "call_expression" else \
            (re.match(r"[A-Za-z_]\w*", k.tree.text_of(n)) or [""])[0] if n.type == "for_statement" else ""
        if name in hits and s.live(n.start_point.row + 1):
            fn = s.fn_of(n)
            if fn is not None:
                out.append((fn.name, n, name, hits[name]))
    return out


def _all_definitions(k: Kernel) -> dict[str, list[str]]:
    """Every body a macro is defined with, all preprocessor branches (`#if __CUDA_ARCH__ >= 350` and
    its `#else`: the device pass keeps the first, the host pass libclang reads the second)."""
    out: dict[str, list[str]] = {}
    for n in walk(k.tree.root):
        if n.type in ("preproc_def", "preproc_function_def"):
            name, value = n.child_by_field_name("name"), n.child_by_field_name("value")
            if name is not None and value is not None:
                out.setdefault(k.tree.text_of(name), []).append(
                    _COMMENT.sub(" ", k.tree.text_of(value)).replace("\\\n", " "))
    return out


# ---- node helpers ---------------------------------------------------------------------------

def strip(node):
    """`node` without enclosing parentheses and casts."""
    while node is not None and node.type in ("parenthesized_expression", "cast_expression"):
        node = node.child_by_field_name("value") if node.type == "cast_expression" else node.named_children[0]
    return node


def callee_name(call) -> str:
    f = call.child_by_field_name("function")
    while f is not None:
        if f.type in ("identifier", "field_identifier"):
            return f.text.decode()
        if f.type == "template_function":
            f = f.child_by_field_name("name")
        elif f.type == "qualified_identifier":
            f = f.child_by_field_name("name")
        elif f.type == "field_expression":
            f = f.child_by_field_name("field")
        else:
            return ""
    return ""


def qualified_callee(call) -> str:
    f = call.child_by_field_name("function")
    if f is None:
        return ""
    if f.type == "template_function":
        f = f.child_by_field_name("name")
    return re.sub(r"\s+", "", f.text.decode()) if f is not None else ""


def call_args(call) -> list:
    args = call.child_by_field_name("arguments")
    return [c for c in args.named_children if c.type != "comment"] if args is not None else []


def base_name(node) -> str | None:
    """The variable an lvalue-ish expression names: `m_i[r]` -> m_i, `(x)` -> x, `s.acc[i]` -> acc."""
    node = strip(node)
    while node is not None:
        if node.type == "identifier":
            return node.text.decode()
        if node.type == "subscript_expression":
            node = strip(node.child_by_field_name("argument"))
        elif node.type == "field_expression":
            f = node.child_by_field_name("field")
            return f.text.decode() if f is not None else None
        elif node.type == "pointer_expression":
            node = strip(node.child_by_field_name("argument"))
        else:
            return None
    return None


def subscripts(node) -> list:
    """Index expressions of `a[i][j]`, outermost array first: [i, j]."""
    out = []
    node = strip(node)
    while node is not None and node.type == "subscript_expression":
        idx = node.child_by_field_name("indices") or node.child_by_field_name("index")
        if idx is not None and idx.type == "subscript_argument_list":
            out += [c for c in idx.named_children]
        elif idx is not None:
            out.append(idx)
        node = strip(node.child_by_field_name("argument"))
    return list(reversed(out))


def identifiers(node) -> set[str]:
    return {n.text.decode() for n in walk(node) if n.type == "identifier"}


def assignments(root) -> Iterator[tuple[object, str, object, object]]:
    """(lhs, operator, rhs, statement node) of assignments and initialised declarations under `root`."""
    for n in walk(root):
        if n.type == "assignment_expression":
            op = n.child_by_field_name("operator")
            yield n.child_by_field_name("left"), op.type if op is not None else "=", n.child_by_field_name("right"), n
        elif n.type == "init_declarator":
            d, v = n.child_by_field_name("declarator"), n.child_by_field_name("value")
            while d is not None and d.type in ("reference_declarator", "pointer_declarator"):
                d = d.named_children[-1] if d.named_children else None
            if d is not None and v is not None and v.type != "initializer_list":
                yield d, "=", v, n


def _induction_var(loop) -> str | None:
    if loop.type != "for_statement":
        return None
    init = loop.child_by_field_name("initializer")
    if init is None:
        return None
    if init.type == "declaration":
        for d in init.children_by_field_name("declarator"):
            if d.type == "init_declarator":
                name = d.child_by_field_name("declarator")
                return name.text.decode() if name is not None else None
    if init.type == "assignment_expression":
        return base_name(init.child_by_field_name("left"))
    return None


def _arch_guarded(node) -> bool:
    """Inside `#if __CUDA_ARCH__ ...` (or its #else): libclang parses the host pass, where every such
    branch of device code is compiled out, but one of them is the device code of some target."""
    for a in ancestors(node):
        if a.type in ("preproc_if", "preproc_ifdef", "preproc_elif", "preproc_elifdef"):
            cond = a.child_by_field_name("condition") or a.child_by_field_name("name")
            if cond is not None and "__CUDA_ARCH__" in cond.text.decode():
                return True
    return False


def _blank_comments(k: Kernel) -> str:
    data = bytearray(k.tree.data)
    for n in walk(k.tree.root):
        if n.type == "comment":
            for i in range(n.start_byte, n.end_byte):
                if data[i] != 0x0A:
                    data[i] = 0x20
    return data.decode(errors="replace")


# ---- integer constant expressions -----------------------------------------------------------

_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.Div: lambda a, b: int(a / b) if b else None, ast.FloorDiv: lambda a, b: int(a / b) if b else None,
        ast.Mod: lambda a, b: a % b if b else None, ast.LShift: lambda a, b: a << b if 0 <= b < 64 else None,
        ast.RShift: lambda a, b: a >> b if 0 <= b < 64 else None, ast.BitAnd: lambda a, b: a & b,
        ast.BitOr: lambda a, b: a | b, ast.BitXor: lambda a, b: a ^ b}


def evaluate(text: str, names: dict[str, int]) -> int | None:
    """The value of a C integer constant expression over `names`, or None."""
    t = _INT_SUFFIX.sub(r"\1", text.strip())
    if not t or len(t) > 200 or re.search(r"[?\"'{};]|\bsizeof\b|::", t):
        return None
    try:
        tree = ast.parse(t, mode="eval")
    except SyntaxError:
        return None

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool):
            return n.value
        if isinstance(n, ast.Name):
            return names.get(n.id)
        if isinstance(n, ast.UnaryOp):
            v = ev(n.operand)
            if v is None:
                return None
            return {ast.USub: -v, ast.UAdd: v, ast.Invert: ~v}.get(type(n.op))
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            a, b = ev(n.left), ev(n.right)
            return None if a is None or b is None else _OPS[type(n.op)](a, b)
        return None

    try:
        return ev(tree)
    except (ArithmeticError, ValueError, RecursionError):
        return None
