"""What a function computes, read off its syntax tree: index arithmetic, loop nests, memory accesses
and the conditions each statement runs under.

A recogniser that reads a kernel by what it computes asks which loop reduces, which array an access
reads at which index, which integer bounds which loop and which bounds check guards a statement; not
what anything is called. `read_function` walks a function body once and answers with

  values     the scalar locals written once, as sympy expressions of the parameters, the thread's
             position (blockIdx / threadIdx / blockDim / gridDim) and the loop counters;
  positions  the locals whose value depends on the thread's position (`row`, `col`, `z`): kept as
             symbols, their definitions alongside, so an index reads `row*K + k`;
  pointers   pointer locals (and parameters moved in place) as (parameter, element offset);
  loops      counted loops: counter, start, exclusive bound, step;
  steps      every declaration, assignment, call and return with its enclosing loops and the
             conditions it runs under (an enclosing `if`, or the negation of an earlier `if (...)
             return;` in the same or an enclosing block).

Indices and bounds are sympy expressions: `row * K + k` and `(long long)k * N + col` compare as
polynomials, casts and parentheses read through; a division, a remainder or a call is one opaque
term. Integer `#define`s given as `macros` read as their values.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import sympy

from klineage.parse.syntax import Node

POSITION = ("blockIdx", "threadIdx", "blockDim", "gridDim")
# calls that read through to their (first) argument: conversions and loads of one element
CONVERSIONS = {"static_cast", "float", "__half2float", "__bfloat162float", "__float2half", "__float2half_rn",
               "__float2bfloat16", "__float2bfloat16_rn", "__ldg", "__ldca", "__ldcs", "__ldcg", "__ldlu",
               "__ldcv", "double", "int", "__int2float_rn", "__float2int_rn", "float2int", "half", "__half"}
Div = sympy.Function("div")
Mod = sympy.Function("mod")


def opaque(text: str) -> sympy.Symbol:
    """One term for code read as a whole (a call, a comparison): its whitespace-free text."""
    return sympy.Symbol(re.sub(r"\s+", "", text))


def literal(text: str) -> sympy.Expr | None:
    """An integer or floating literal's value (suffixes u, l, f dropped); None for anything else."""
    t = text.strip().lower()
    m = re.fullmatch(r"(0x[0-9a-f]+|\d+)(?:u|l|ul|lu|ll|ull|llu)?", t)
    if m:
        return sympy.Integer(int(m.group(1), 0))
    m = re.fullmatch(r"((?:\d+\.\d*|\.\d+|\d+)(?:e[+-]?\d+)?)f?", t)
    if m:
        return sympy.Float(float(m.group(1)))
    return None


def call_name(node: Node) -> str:
    """The called function of a call_expression (`static_cast` for `static_cast<T>(x)`)."""
    fn = node.child_by_field_name("function")
    if fn is None:
        return ""
    if fn.type == "template_function":
        fn = fn.child_by_field_name("name") or fn.named_children[0]
    return fn.text.decode() if fn.type in ("identifier", "field_expression", "qualified_identifier") else ""


def call_args(node: Node) -> list[Node]:
    args = node.child_by_field_name("arguments")
    return [a for a in args.named_children if a.type != "comment"] if args is not None else []


def strip(node: Node) -> Node:
    """The node under its parentheses, casts and conversion calls."""
    while True:
        if node.type == "parenthesized_expression" and node.named_children:
            node = node.named_children[0]
        elif node.type == "cast_expression" and node.child_by_field_name("value") is not None:
            node = node.child_by_field_name("value")
        elif node.type == "call_expression" and call_name(node) in CONVERSIONS and len(call_args(node)) == 1:
            node = call_args(node)[0]
        else:
            return node


def sym(node: Node, env: dict[str, sympy.Expr] | None = None) -> sympy.Expr:
    """The value of an expression node: identifiers through `env` (else a symbol of the name),
    `blockIdx.x` and the like as symbols, + - * as polynomials, / and % as div() / mod() terms,
    anything else one opaque term."""
    env = env or {}
    node = strip(node)
    t = node.type
    if t == "identifier":
        name = node.text.decode()
        return env.get(name, sympy.Symbol(name))
    if t == "number_literal":
        v = literal(node.text.decode())
        return v if v is not None else opaque(node.text.decode())
    if t == "field_expression":
        return sympy.Symbol(re.sub(r"\s+", "", node.text.decode()))
    if t == "unary_expression":
        op = node.child_by_field_name("operator").type
        arg = sym(node.child_by_field_name("argument"), env)
        if op == "-":
            return -arg
        if op == "+":
            return arg
    if t == "binary_expression":
        op = node.child_by_field_name("operator").type
        if op in ("+", "-", "*", "/", "%"):
            a = sym(node.child_by_field_name("left"), env)
            b = sym(node.child_by_field_name("right"), env)
            if op == "+":
                return a + b
            if op == "-":
                return a - b
            if op == "*":
                return a * b
            if op == "/":
                return Div(a, b)
            return Mod(a, b)
    return opaque(node.text.decode())


def is_position(expr: sympy.Expr, positions) -> bool:
    """Whether `expr` depends on the thread's position (or on a local that does)."""
    for s in expr.atoms(sympy.Symbol):
        if s.name.split(".")[0] in POSITION or s.name in positions:
            return True
    return False


# ---- the function read --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    name: str
    type: str          # the declared type as written, qualifiers included (`const float`)
    pointer: bool


@dataclass(frozen=True)
class Loop:
    """A counted loop `for (var = start; var < bound; var += step)`; bound None when its condition
    is not `var < E` / `var <= E` / `E > var`, step None when its update is not a constant step."""
    var: str
    start: sympy.Expr | None
    bound: sympy.Expr | None
    step: sympy.Expr | None
    node: Node


@dataclass(frozen=True)
class Cond:
    """`lhs < rhs` (every comparison is written so), or an opaque condition (`lhs` its text, rhs None)."""
    lhs: sympy.Expr
    rhs: sympy.Expr | None
    text: str


@dataclass(frozen=True)
class Step:
    """One statement of the body in its context. kind: decl (target = the name, value = its
    initialiser), assign (target = the assigned node, op = `=`, `+=` ...), call, return."""
    kind: str
    node: Node
    target: Node | str | None
    op: str
    value: Node | None
    loops: tuple[Loop, ...]
    conds: tuple[Cond, ...]
    env: dict = field(default_factory=dict, compare=False, hash=False)  # `values` as of this statement


@dataclass
class FunctionRead:
    name: str
    params: list[Param]
    values: dict[str, sympy.Expr] = field(default_factory=dict)
    positions: dict[str, sympy.Expr] = field(default_factory=dict)
    pointers: dict[str, tuple[str, sympy.Expr]] = field(default_factory=dict)
    arrays: dict[str, list[Node]] = field(default_factory=dict)  # locals built from an argument list (dim3 g(a, b))
    loops: list[Loop] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    written: dict[str, int] = field(default_factory=dict)  # local scalar -> times assigned after its declaration
    unread: list[str] = field(default_factory=list)  # statements the reader passed over (while, switch, goto ...)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def element(self, node: Node, env: dict | None = None) -> tuple[str, sympy.Expr] | None:
        """(base array, element index) of a subscript `p[i]` or dereference `*(p + i)` (or the address
        `&p[i]` a load such as __ldg reads through), pointer locals read through to their parameter;
        None for anything else."""
        node = strip(node)
        env = self.values if env is None else env
        if node.type == "pointer_expression" and node.child_by_field_name("operator").type == "&":
            node = strip(node.child_by_field_name("argument"))  # __ldg(&p[i]) reads p[i]
        if node.type == "subscript_expression":
            base = strip(node.child_by_field_name("argument"))
            idx = node.child_by_field_name("indices")
            if idx is None:
                idx = next((c for c in node.named_children if c.type == "subscript_argument_list"), None)
            items = [c for c in idx.named_children] if idx is not None else []
            if base.type != "identifier" or len(items) != 1:
                return None
            name = base.text.decode()
            arr, off = self.pointers.get(name, (name, sympy.Integer(0)))
            return arr, sympy.expand(off + sym(items[0], env))
        if node.type == "pointer_expression" and node.child_by_field_name("operator").type == "*":
            arg = strip(node.child_by_field_name("argument"))
            if arg.type == "identifier":
                name = arg.text.decode()
                arr, off = self.pointers.get(name, (name, sympy.Integer(0)))
                return arr, sympy.expand(off)
            if arg.type == "binary_expression" and arg.child_by_field_name("operator").type == "+":
                left, right = (strip(arg.child_by_field_name(k)) for k in ("left", "right"))
                for p, i in ((left, right), (right, left)):
                    if p.type == "identifier" and (p.text.decode() in self.pointers or
                                                   (self.param(p.text.decode()) or Param("", "", False)).pointer):
                        arr, off = self.pointers.get(p.text.decode(), (p.text.decode(), sympy.Integer(0)))
                        return arr, sympy.expand(off + sym(i, env))
        return None


def _params(fn: Node) -> list[Param]:
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    out: list[Param] = []
    if decl is None:
        return out
    plist = decl.child_by_field_name("parameters")
    for p in plist.named_children if plist is not None else []:
        if p.type != "parameter_declaration":
            continue
        d = p.child_by_field_name("declarator")
        ptr = False
        while d is not None and d.type in ("pointer_declarator", "reference_declarator", "array_declarator"):
            ptr = ptr or d.type in ("pointer_declarator", "array_declarator")
            d = d.child_by_field_name("declarator") or (d.named_children[-1] if d.named_children else None)
        if d is None or d.type != "identifier":
            continue
        typ = p.child_by_field_name("type")
        quals = " ".join(c.text.decode() for c in p.children if c.type == "type_qualifier")
        out.append(Param(d.text.decode(), f"{quals} {typ.text.decode() if typ else ''}".strip(), ptr))
    return out


def conditions(node: Node, env: dict, negate: bool = False) -> list[Cond]:
    """The conjuncts a condition asserts (negated: those its negation asserts), each `lhs < rhs` where
    it is a comparison (`a >= b` negated is `a < b`; `a <= b` is `a < b + 1`); anything else one
    opaque conjunct."""
    node = node.named_children[0] if node.type in ("condition_clause", "parenthesized_expression") and \
        len(node.named_children) == 1 else node
    t = node.type
    if t == "parenthesized_expression":
        return conditions(node.named_children[0], env, negate)
    if t == "unary_expression" and node.child_by_field_name("operator").type == "!":
        return conditions(node.child_by_field_name("argument"), env, not negate)
    if t == "binary_expression":
        op = node.child_by_field_name("operator").type
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if (op == "&&" and not negate) or (op == "||" and negate):
            return conditions(left, env, negate) + conditions(right, env, negate)
        if op in ("<", "<=", ">", ">="):
            a, b = sym(left, env), sym(right, env)
            if negate:
                op = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}[op]
            lhs, rhs = {"<": (a, b), "<=": (a, b + 1), ">": (b, a), ">=": (b, a + 1)}[op]
            return [Cond(lhs, rhs, node.text.decode())]
    text = node.text.decode()
    return [Cond(opaque(("!" if negate else "") + text), None, ("!" if negate else "") + text)]


def _returns(node: Node) -> bool:
    """A statement that only returns (`return;`, `{ return; }`)."""
    if node.type == "return_statement":
        return True
    if node.type == "compound_statement":
        inner = [c for c in node.named_children if c.type != "comment"]
        return len(inner) == 1 and inner[0].type == "return_statement"
    return False


class _Reader:
    def __init__(self, fn: Node, macros: dict[str, int]):
        from klineage.parse.syntax import function_name
        self.r = FunctionRead(function_name(fn), _params(fn))
        self.env: dict[str, sympy.Expr] = {k: sympy.Integer(v) for k, v in macros.items()}
        self.body = fn.child_by_field_name("body")

    def run(self) -> FunctionRead:
        if self.body is not None:
            self.block(self.body, (), ())
        self.r.values = dict(self.env)
        return self.r

    def step(self, kind, node, target, op, value, loops, conds):
        self.r.steps.append(Step(kind, node, target, op, value, loops, conds, dict(self.env)))

    def block(self, node: Node, loops: tuple, conds: tuple) -> tuple:
        """Walk a compound statement; returns the conditions its early returns leave for what follows."""
        for st in node.named_children:
            conds = self.stmt(st, loops, conds)
        return conds

    def declare(self, st: Node, loops, conds):
        typ = st.child_by_field_name("type")
        for d in st.named_children:
            if d.type not in ("init_declarator", "identifier", "pointer_declarator", "array_declarator"):
                continue
            value = d.child_by_field_name("value") if d.type == "init_declarator" else None
            decl = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
            pointer = False
            while decl is not None and decl.type in ("pointer_declarator", "reference_declarator"):
                pointer = pointer or decl.type == "pointer_declarator"
                decl = decl.child_by_field_name("declarator")
            if decl is None:
                continue
            if decl.type == "array_declarator":
                name_node = decl.child_by_field_name("declarator")
                if name_node is not None and name_node.type == "identifier":
                    self.env.pop(name_node.text.decode(), None)
                continue
            if decl.type != "identifier":
                continue
            name = decl.text.decode()
            self.step("decl", st, name, "=", value, loops, conds)
            self.r.written.setdefault(name, 0)
            if value is None:
                self.env[name] = sympy.Symbol(name)
                continue
            if value.type in ("argument_list", "initializer_list") or (
                    value.type == "call_expression" and typ is not None and call_name(value) == typ.text.decode()):
                self.r.arrays[name] = call_args(value) if value.type == "call_expression" else \
                    [c for c in value.named_children if c.type != "comment"]
                continue
            if pointer:
                self.pointer(name, value)
                continue
            val = sympy.expand(sym(value, self.env))
            if is_position(val, self.r.positions) and not loops:
                self.r.positions[name] = val
                self.env[name] = sympy.Symbol(name)
            else:
                self.env[name] = val

    def pointer(self, name: str, value: Node) -> None:
        """`T* p = q + e;` / `= &q[e]` / `= q`: p is q's element e on."""
        v = strip(value)
        base, off = None, sympy.Integer(0)
        if v.type == "identifier":
            base = v.text.decode()
        elif v.type == "binary_expression" and v.child_by_field_name("operator").type in ("+", "-"):
            left, right = strip(v.child_by_field_name("left")), v.child_by_field_name("right")
            if left.type == "identifier":
                base = left.text.decode()
                off = sym(right, self.env) * (1 if v.child_by_field_name("operator").type == "+" else -1)
        elif v.type == "pointer_expression" and v.child_by_field_name("operator").type == "&":
            got = self.r.element(v.child_by_field_name("argument"), self.env)
            if got is not None:
                self.r.pointers[name] = got
            return
        if base is None:
            return
        b, o = self.r.pointers.get(base, (base, sympy.Integer(0)))
        self.r.pointers[name] = (b, sympy.expand(o + off))

    def assign(self, e: Node, st: Node, loops, conds):
        if e.type == "update_expression":
            arg = e.child_by_field_name("argument")
            op = next((c.type for c in e.children if c.type in ("++", "--")), "++")
            self.step("assign", st, arg, op, None, loops, conds)
            if arg.type == "identifier":
                self.written(arg.text.decode())
            return
        if e.type == "comma_expression":
            for c in e.named_children:
                self.assign(c, st, loops, conds)
            return
        if e.type != "assignment_expression":
            if e.type == "call_expression":
                self.step("call", st, None, "", e, loops, conds)
            return
        target, value = e.child_by_field_name("left"), e.child_by_field_name("right")
        op = e.child_by_field_name("operator").type
        self.step("assign", st, target, op, value, loops, conds)
        if target.type == "identifier":
            name = target.text.decode()
            p = self.r.param(name)
            if (name in self.r.pointers or (p is not None and p.pointer)) and op in ("+=", "-=") and not loops:
                b, o = self.r.pointers.get(name, (name, sympy.Integer(0)))
                d = sym(value, self.env)
                self.r.pointers[name] = (b, sympy.expand(o + (d if op == "+=" else -d)))
                return
            self.written(name)

    def written(self, name: str) -> None:
        """A local assigned after its declaration reads as itself from then on (not its first value)."""
        self.r.written[name] = self.r.written.get(name, 0) + 1
        self.env[name] = sympy.Symbol(name)
        self.r.positions.pop(name, None)

    def stmt(self, st: Node, loops: tuple, conds: tuple) -> tuple:
        t = st.type
        if t == "comment":
            return conds
        if t == "declaration":
            self.declare(st, loops, conds)
        elif t == "expression_statement":
            for e in st.named_children:
                self.assign(e, st, loops, conds)
        elif t == "compound_statement":
            self.block(st, loops, conds)
        elif t == "if_statement":
            cond = st.child_by_field_name("condition")
            then, other = st.child_by_field_name("consequence"), st.child_by_field_name("alternative")
            if other is not None and other.type == "else_clause":
                other = other.named_children[0] if other.named_children else None
            yes, no = conditions(cond, self.env), conditions(cond, self.env, negate=True)
            if _returns(then) and other is None:
                self.step("return", then, None, "", None, loops, conds + tuple(yes))
                return conds + tuple(no)
            self.stmt(then, loops, conds + tuple(yes))
            if other is not None:
                self.stmt(other, loops, conds + tuple(no))
        elif t == "for_statement":
            self.loop(st, loops, conds)
        elif t == "return_statement":
            val = st.named_children[0] if st.named_children else None
            self.step("return", st, None, "", val, loops, conds)
        elif t in ("while_statement", "do_statement", "switch_statement", "goto_statement", "labeled_statement"):
            self.r.unread.append(st.text.decode()[:60])
            body = st.child_by_field_name("body")
            if body is not None:
                self.stmt(body, loops + (Loop("", None, None, None, st),), conds)
        return conds

    def loop(self, st: Node, loops: tuple, conds: tuple) -> None:
        init = st.child_by_field_name("initializer")
        var, start = None, None
        if init is not None and init.type == "declaration":
            d = next((c for c in init.named_children if c.type == "init_declarator"), None)
            if d is not None and d.child_by_field_name("declarator").type == "identifier":
                var = d.child_by_field_name("declarator").text.decode()
                start = sym(d.child_by_field_name("value"), self.env)
        elif init is not None and init.type == "assignment_expression" and \
                init.child_by_field_name("left").type == "identifier":
            var = init.child_by_field_name("left").text.decode()
            start = sym(init.child_by_field_name("right"), self.env)
        bound = step = None
        cond = st.child_by_field_name("condition")
        if var is not None:
            self.env[var] = sympy.Symbol(var)
            self.r.positions.pop(var, None)
        if var is not None and cond is not None:
            cs = conditions(cond, self.env)
            if len(cs) == 1 and cs[0].rhs is not None and cs[0].lhs == sympy.Symbol(var):
                bound = cs[0].rhs
        upd = st.child_by_field_name("update")
        if var is not None and upd is not None:
            if upd.type == "update_expression" and upd.child_by_field_name("argument").text.decode() == var:
                step = sympy.Integer(1 if "++" in upd.text.decode() else -1)
            elif upd.type == "assignment_expression" and upd.child_by_field_name("left").text.decode() == var:
                op = upd.child_by_field_name("operator").type
                right = upd.child_by_field_name("right")
                if op == "+=":
                    step = sym(right, self.env)
                elif op == "=":
                    step = sympy.expand(sym(right, self.env) - sympy.Symbol(var))
                    if sympy.Symbol(var) in step.free_symbols:
                        step = None
        lp = Loop(var or "", start, bound, step, st)
        self.r.loops.append(lp)
        body = st.child_by_field_name("body")
        if body is not None:
            self.stmt(body, loops + (lp,), conds)


def read_function(fn: Node, macros: dict[str, int] | None = None) -> FunctionRead:
    """The function's body read statement by statement (see the module docstring)."""
    return _Reader(fn, macros or {}).run()


_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+\(?\s*(\d+)[uUlL]*\s*\)?[ \t]*(?://[^\n]*)?$", re.M)


def integer_macros(source: str) -> dict[str, int]:
    """Object-like `#define NAME <int>` of the source (the first definition of a name)."""
    out: dict[str, int] = {}
    for m in _DEFINE.finditer(source):
        out.setdefault(m.group(1), int(m.group(2)))
    return out
