"""Fast-math intrinsics: `__expf`, `__logf`, `__sinf`, `__cosf`, `__powf`, `__fdividef`,
`__frcp_rn`, `rsqrtf`, `__exp10f`, `__log2f`, `__tanf` instead of the precise library calls.

Locus: one intrinsic within one function (all its calls there together). Deoptimize writes the
precise form (`__expf(x)` -> `expf(x)`, `__fdividef(a, b)` -> `(a) / (b)`, `rsqrtf(x)` ->
`(1.0f / sqrtf(x))`, `__frcp_rn(x)` -> `(1.0f / (x))`); reoptimize is the inverse and applies
to natural code too (any precise call with a fast counterpart).
"""
from __future__ import annotations

from klineage.mechanisms.base import Applied, Family, Feature, Form, Kernel, Mechanism, NotApplicable, detail
from klineage.parse.syntax import Edit

# fast intrinsic -> (precise callee, arity); callee None means an arithmetic template.
FAST = {"__expf": "expf", "__exp10f": "exp10f", "__logf": "logf", "__log2f": "log2f", "__sinf": "sinf",
        "__cosf": "cosf", "__tanf": "tanf", "__powf": "powf", "__sincosf": "sincosf"}
TEMPLATES = {"__fdividef": ("({0}) / ({1})", 2), "__frcp_rn": ("(1.0f / ({0}))", 1),
             "rsqrtf": ("(1.0f / sqrtf({0}))", 1)}
PRECISE = {v: k for k, v in FAST.items()}


def _calls(k: Kernel, names) -> list:
    out = []
    for caps in k.tree.matches("calls"):
        callee, args, call = caps["callee"][0], caps["args"][0], caps["call"][0]
        name = callee.text.decode()
        if name in names and k.live(call) and k.function_of(call) != "<file>":
            out.append((k.function_of(call), name, call, callee, [a for a in args.named_children if a.type != "comment"]))
    return out


_EXP2_CALLS = ("exp2f", "exp2", "exp2l")


def _other_forms(k: Kernel) -> list[Feature]:
    """Fast math the rewrite does not take (seen, not removable): hand-written PTX approximations
    (tanh.approx, sin.approx, rcp.approx, ...; not ex2.approx, the base-2 exponential mechanism of its
    own), and project macros over the intrinsics (`#define FAST_EXP(x) __expf(x)`), one feature per
    function and macro or instruction."""
    import re
    from klineage.mechanisms.codescan import asm_ops, macro_calls
    groups: dict[tuple[str, str], list] = {}
    for op in asm_ops(k):
        parts = op.opcode.split(".")
        if "approx" in parts and parts[0] != "ex2":
            groups.setdefault((op.function, "asm:" + ".".join(parts[:2])), []).append((op.node, op.opcode))
    names = "|".join(map(re.escape, sorted(set(FAST) | set(TEMPLATES) - {"rsqrtf"})))
    for fn, call, macro, m in macro_calls(k, rf"(?<![\w.])({names})\s*\("):
        groups.setdefault((fn, macro), []).append((call, m.group(1)))
    return [Feature(FastMath.NAME, f"{fn}:{name}", (k.lines(hits[0][0])[0], k.lines(hits[-1][0])[1]),
                    anchor=f"math call {name}", detail=detail(intrinsic=hits[0][1], calls=len(hits)),
                    removable=False, path=f"{fn} > {name}")
            for (fn, name), hits in groups.items()]


class FastMath(Mechanism):
    NAME = "fast_math"
    DESCRIPTION = "fast-math intrinsics (__expf, __fdividef, rsqrtf, __frcp_rn, ...) instead of precise calls"
    PRECONDITIONS = {
        "data_types": [{"condition": "fp32 math whose tolerance admits a few ulp (__expf: 2 + 1.16*|x| ulp)",
                        "fails_without": "results differ from the precise library beyond a tight tolerance"}],
        "layout": [{"condition": "arguments within the intrinsic's accurate range (e.g. |x| moderate for "
                                 "__sinf; denominator < 2^126 for __fdividef)",
                    "fails_without": "__fdividef returns 0 for huge denominators; __sinf loses accuracy far from 0"}],
    }

    def detect(self, k: Kernel) -> list[Feature]:
        groups: dict[tuple[str, str], list] = {}
        for fn, name, call, _, _ in _calls(k, set(FAST) | set(TEMPLATES)):
            groups.setdefault((fn, name), []).append(call)
        return [Feature(self.NAME, f"{fn}:{name}", (k.lines(calls[0])[0], k.lines(calls[-1])[1]),
                        anchor=f"math call {name}", detail=detail(intrinsic=name, calls=len(calls)),
                        path=f"{fn} > call {name}")
                for (fn, name), calls in groups.items()]

    def detect_more(self, k: Kernel) -> list[Feature]:
        return _other_forms(k)

    def compiled(self, ck) -> list:
        """Approximate math (.approx) the source asked for, compared with what it calls at that line:
        hand-written PTX (except ex2, the base-2 exponential mechanism of its own), or the
        intrinsics' non-flushing forms (div.approx, sin/cos/lg2/ex2.approx). Not counted: the .ftz
        forms precise library functions use inside (expf, tanhf, erff, powf), rsqrt.approx (rsqrtf,
        the standard reciprocal square root, is approximate with or without fast math), and ex2.approx
        on a line that calls exp2f (the precise exp2f is that one instruction)."""
        from klineage.mechanisms.compiled import calls_any
        out = []
        fast = set(FAST) | set(TEMPLATES) | {"__sincosf"}
        for fn in ck.module.functions:
            for i in fn.instrs:
                if "approx" not in i.parts:
                    continue
                if i.asm:
                    if i.op == "ex2":
                        continue
                elif "ftz" in i.parts or i.op == "rsqrt":
                    continue
                elif i.op == "ex2":
                    text = " ".join(ck.text(ln) for ln in ck.lines(i))
                    if calls_any(text, _EXP2_CALLS) and not calls_any(text, fast):
                        continue
                site = ck.site(self.NAME, fn, [i])
                if site is not None:
                    out.append(site)
        return out

    def deoptimize(self, k: Kernel, feature: Feature):
        fname, name = feature.locus.split(":", 1)
        edits, befores, afters = [], [], []
        for fn, n, call, callee, argv in _calls(k, {name}):
            if fn != fname:
                continue
            if name in FAST:
                edits.append(Edit(callee.start_byte, callee.end_byte, FAST[name]))
                new_text = FAST[name] + k.tree.text_of(call)[len(name):]
            else:
                tmpl, arity = TEMPLATES[name]
                if len(argv) != arity:
                    return NotApplicable(f"{name} called with {len(argv)} arguments")
                new_text = tmpl.format(*[k.tree.text_of(a) for a in argv])
                edits.append(Edit(call.start_byte, call.end_byte, new_text))
            befores.append(k.tree.text_of(call))
            afters.append(new_text)
        if not edits:
            return NotApplicable(f"no {name} call in {fname}")
        return Applied(k.tree.edit(edits), self.NAME, feature.locus, before="\n".join(befores),
                       after="\n".join(afters), config={"intrinsic": name, "function": fname, "precise": afters})

    def reoptimize(self, k: Kernel, locus: str | None = None, config: dict | None = None):
        config = config or {}
        name = config.get("intrinsic") or (locus.split(":", 1)[1] if locus else None)
        fname = config.get("function") or (locus.split(":", 1)[0] if locus else None)
        if name in TEMPLATES:
            texts = config.get("precise") or []
            edits, done = [], []
            data = k.tree.data
            for t in texts:
                # restore each precise template text written by deoptimize, inside the function
                fn_node = next((f for f in k.sem.functions if f.name == fname), None)
                start = data.find(t.encode())
                if fn_node is None or start < 0:
                    return NotApplicable(f"`{t}` not found in {fname}: nothing to turn back into {name}")
                done.append(t)
            call_texts = self._calls_back(name, texts)
            new = k.source
            for t, c in zip(texts, call_texts):
                new = new.replace(t, c, 1)
            return Applied(new, self.NAME, f"{fname}:{name}", before="\n".join(done), after="\n".join(call_texts),
                           config=dict(config))
        wanted = {PRECISE[FAST[name]]: FAST[name]} if name in FAST else {}
        precise = {v: k_ for k_, v in (wanted or FAST).items()}
        edits, befores, afters = [], [], []
        for fn, n, call, callee, argv in _calls(k, set(precise)):
            if fname and fn != fname:
                continue
            if fname is None:
                fname = fn
            if fn != fname:
                continue
            edits.append(Edit(callee.start_byte, callee.end_byte, precise[n]))
            befores.append(k.tree.text_of(call))
            afters.append(precise[n] + k.tree.text_of(call)[len(n):])
        if not edits:
            return NotApplicable("no precise math call with a fast intrinsic counterpart")
        fast = precise[_calls(k, set(precise))[0][1]] if name is None else name
        return Applied(k.tree.edit(edits), self.NAME, f"{fname}:{fast}", before="\n".join(befores),
                       after="\n".join(afters), config={"intrinsic": fast, "function": fname})

    def _calls_back(self, name: str, texts: list[str]) -> list[str]:
        tmpl, arity = TEMPLATES[name]
        head, _, tail = tmpl.partition("{0}")
        out = []
        for t in texts:
            if arity == 1:
                inner = t[len(head):len(t) - len(tail)]
                out.append(f"{name}({inner})")
            else:
                mid = tmpl[tmpl.index("{0}") + 3:tmpl.index("{1}")]
                body = t[len(head):len(t) - len(tmpl[tmpl.index("{1}") + 3:])]
                a, b = body.split(mid, 1)
                out.append(f"{name}({a}, {b})")
        return out


FAMILY = Family(
    FastMath, rank=20,
    forms=(
        Form("a fast intrinsic in place of the precise call: __expf, __logf, __sinf, __cosf, __powf, __fdividef, "
             "__frcp_rn, rsqrtf, __exp10f, __log2f, __tanf"),
        Form("hand-written PTX approximations (tanh.approx, sin.approx, rcp.approx, ...; not ex2.approx)",
             rewritable=False),
        Form("a project macro over the intrinsics (#define FAST_EXP(x) __expf(x))", rewritable=False),
    ),
    compiler="approximate math (.approx) the source asked for, not the .ftz forms precise library calls use inside",
    forward=("reoptimize",),
    anchor_query=("(call_expression function: (identifier) @callee (#match? @callee "
                  '"^(__expf|__logf|__fdividef|__frcp_rn|rsqrtf|__sinf|__cosf|__powf)$"))'),
    addresses=frozenset({"compute"}),
    rules=("dtype_intrinsics", "fast_math"),
)
