"""Warp-shuffle reductions: lanes exchange register values with `__shfl_xor_sync` (butterfly) or
`__shfl_down_sync` (tree) instead of going through shared memory.

Detected: a loop whose body is one reduction step `v OP= __shfl_xor_sync(mask, v, o)` (or
`v = f(v, __shfl_*_sync(mask, v, o))`, `v = v OP __shfl...`), with the loop variable as the offset
and offsets that stay below 32 (`for (o = 16; o > 0; o >>= 1)`, `for (o = 1; o < 32; o <<= 1)`,
`warpSize / 2`, ...), possibly under `#pragma unroll`; and unrolled runs of such steps with literal
offsets. Locus: function, shuffle kind and the (first) step's text,
`warp_sum:shfl_xor:v += __shfl_xor_sync(0xffffffffu, v, o)`.

Deoptimize keeps the loop and the reduction operator and replaces each exchange by a round trip
through a per-block shared buffer declared just before the reduction,
`__shared__ T kl_warp_red[1024]` indexed by the linear thread index `kl_t` (warps are 32
consecutive linear indices): write the own value, `__syncwarp()`, read the partner slot (`kl_t ^ o`
for xor; `kl_t + o` when `(kl_t & 31) + o < 32`, else the own slot, for down, exactly what the
shuffle returns), `__syncwarp()`. The partner value is combined in the same expression as before,
so the result is bit-identical. A mask other than a full-warp literal is kept as
`__syncwarp(mask)`. Reoptimize is the exact inverse with the configuration, and on natural code
turns this canonical shared-buffer form back into shuffles (mask `0xffffffffu` for `__syncwarp()`)
and drops the buffer once unused. The classic block-wide shared-memory tree loop
(`if (tid < s) sdata[tid] += sdata[tid + s]; __syncthreads();`) is not rewritten: turning it into
shuffles changes its structure (warp, then cross-warp), not a mechanical step. The forms seen
but not rewritten, and the compiled evidence, are read in seen.py.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


from klineage.mechanisms.base import Applied, Family, Feature, Form, Kernel, Mechanism, NotApplicable, detail, \
    number_loci, squash
from klineage.mechanisms.vector_forms import declarators, declared, device_function, line_start, paren
from klineage.mechanisms.families.warp_reduction.seen import _args, _int, _other_forms, _reduction_shuffles
from klineage.parse import syntax
from klineage.parse.syntax import Edit, Node, node_path, walk

_FULL_MASKS = {"0xffffffff", "0xffffffffu", "0xffffffffull", "0xfffffffful", "~0", "~0u", "-1", "0xffffffffU"}
_WARP = r"(?:warpSize|WARP_SIZE|kWarpSize|WARPSIZE|32)"
_LINEAR_TID = "threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)"
_CANON = re.compile(r"\{ (?P<b>\w+)\[(?P<t>\w+)\] = (?P<v>[^;]+); __syncwarp\((?P<m>[^;]*)\); "
                    r"(?P<s>.+;) __syncwarp\((?P=m)\); \}")
_OPERAND = r"(?P<o>\w+|\([^()]*(?:\([^()]*\)[^()]*)*\))"


@dataclass
class _Red:
    kind: str                 # "shfl_xor" | "shfl_down"
    form: str                 # "loop" | "unrolled"
    stmts: list               # the expression statements holding the shuffles
    calls: list               # the shuffle call of each statement
    loop: Node | None
    var: str
    mask: str
    width: str | None
    offsets: list
    fn: Node

    @property
    def function(self) -> str:
        return syntax.function_name(self.fn)

    @property
    def first(self) -> Node:
        """First node of the construct: the loop's `#pragma`, the loop, or the first step."""
        if self.loop is None:
            return self.stmts[0]
        prev = self.loop.prev_named_sibling
        if prev is not None and prev.type == "preproc_call" and prev.text.decode().lstrip().startswith("#pragma") \
                and prev.end_point.row + 1 >= self.loop.start_point.row:
            return prev
        return self.loop


def _step(k: Kernel, call: Node):
    """(statement, var, mask, offset, width) when `call` is one step `v = ...shfl(mask, v, o)...;`."""
    argv = _args(call)
    if len(argv) not in (3, 4):
        return None
    stmt = call.parent
    while stmt is not None and stmt.type != "expression_statement":
        if stmt.type in ("compound_statement", "function_definition", "for_statement"):
            return None
        stmt = stmt.parent
    if stmt is None or stmt.named_child_count != 1:
        return None
    assign = stmt.named_children[0]
    if assign.type != "assignment_expression":
        return None
    left = assign.child_by_field_name("left")
    var = k.tree.text_of(argv[1])
    if squash(k.tree.text_of(left)) != squash(var):
        return None
    shuffles = [n for n in walk(assign) if n.type == "call_expression" and
                k.tree.text_of(n.child_by_field_name("function")) in ("__shfl_xor_sync", "__shfl_down_sync")]
    if len(shuffles) != 1:
        return None
    width = k.tree.text_of(argv[3]) if len(argv) == 4 else None
    return stmt, var, k.tree.text_of(argv[0]), argv[2], width


def _loop_offsets_ok(k: Kernel, loop: Node, o: str) -> bool:
    """The loop's offsets are powers of two below 32 (a warp-internal exchange)."""
    init = loop.child_by_field_name("initializer")
    cond = loop.child_by_field_name("condition")
    upd = loop.child_by_field_name("update")
    if init is None or cond is None or upd is None:
        return False
    m = re.fullmatch(r"(?:[\w ]+ )?" + re.escape(o) + r" = (.+?);?", squash(k.tree.text_of(init)))
    if not m:
        return False
    start, c, u = m.group(1), squash(k.tree.text_of(cond)), squash(k.tree.text_of(upd))
    q = re.escape(o)
    down = re.fullmatch(rf"{q} >>= 1|{q} /= 2|{q} = {q} >> 1|{q} = {q} / 2", u)
    up = re.fullmatch(rf"{q} <<= 1|{q} \*= 2|{q} = {q} << 1|{q} = {q} \* 2|{q} \+= {q}", u)
    if down:
        first = _int(start)
        ok_start = (first is not None and 1 <= first <= 16) or re.fullmatch(rf"\(?{_WARP} (?:/ 2|>> 1)\)?", start)
        return bool(ok_start) and bool(re.fullmatch(rf"{q} > 0|{q} >= 1|{q} != 0|0 < {q}|{q}", c))
    if up:
        first = _int(start)
        if first is None or not 1 <= first <= 16:
            return False
        lt = re.fullmatch(rf"{q} < (\w+)", c)
        le = re.fullmatch(rf"{q} <= (\w+)", c)
        if lt:
            b = _int(lt.group(1))
            return (b is not None and b <= 32) or bool(re.fullmatch(_WARP, lt.group(1)))
        if le:
            b = _int(le.group(1))
            return b is not None and b <= 16
    return False


def _loop_of(stmt: Node) -> Node | None:
    """The for loop whose whole body is `stmt` (bare or alone in braces)."""
    p = stmt.parent
    if p is not None and p.type == "compound_statement" and len([c for c in p.named_children
                                                                 if c.type != "comment"]) == 1:
        body, p = p, p.parent
    else:
        body = stmt
    if p is not None and p.type == "for_statement" and p.child_by_field_name("body") == body:
        return p
    return None


def _reductions(k: Kernel) -> list[tuple[str, _Red]]:
    steps = []
    for caps in k.tree.matches("shfl_calls"):
        call = caps["call"][0]
        fn = device_function(call)
        if fn is None or not k.live(call):
            continue
        s = _step(k, call)
        if s is None:
            continue
        stmt, var, mask, off, width = s
        kind = caps["callee"][0].text.decode()[2:-5]  # shfl_xor / shfl_down
        steps.append((call, stmt, var, mask, off, width, kind, fn))
    reds: list[_Red] = []
    for call, stmt, var, mask, off, width, kind, fn in steps:
        loop = _loop_of(stmt)
        if loop is not None:
            if off.type == "identifier" and _loop_offsets_ok(k, loop, off.text.decode()):
                reds.append(_Red(kind, "loop", [stmt], [call], loop, var, mask, width, [off.text.decode()], fn))
            continue
        value = _int(k.tree.text_of(off))
        if value is None or not 0 < value < 32:
            continue
        last = reds[-1] if reds else None
        if (last is not None and last.form == "unrolled" and last.kind == kind and last.var == var
                and last.mask == mask and _next_stmt(last.stmts[-1]) == stmt):
            last.stmts.append(stmt)
            last.calls.append(call)
            last.offsets.append(k.tree.text_of(off))
        else:
            reds.append(_Red(kind, "unrolled", [stmt], [call], None, var, mask, width, [k.tree.text_of(off)], fn))
    reds.sort(key=lambda r: r.first.start_byte)
    return number_loci([(f"{r.function}:{r.kind}:{squash(k.tree.text_of(r.stmts[0]).rstrip(';'))}", r)
                        for r in reds])


def _next_stmt(n: Node) -> Node | None:
    s = n.next_named_sibling
    while s is not None and s.type == "comment":
        s = s.next_named_sibling
    return s


def _sync(mask: str) -> str:
    return "__syncwarp()" if mask.replace(" ", "") in _FULL_MASKS else f"__syncwarp({mask})"


def _names(k: Kernel, fn: Node) -> tuple[str, str]:
    text = k.tree.text_of(fn)
    n = 1
    while True:
        suf = "" if n == 1 else f"_{n}"
        b, t = f"kl_warp_red{suf}", f"kl_t{suf}"
        if not re.search(rf"\b({b}|{t})\b", text):
            return b, t
        n += 1


def _partner(kind: str, b: str, t: str, o: str) -> str:
    o = paren(o)
    if kind == "shfl_xor":
        return f"{b}[{t} ^ {o}]"
    return f"{b}[({t} & 31) + {o} < 32 ? {t} + {o} : {t}]"


def _indent_of(k: Kernel, node: Node) -> str:
    data = k.tree.data
    start = line_start(data, node.start_byte)
    lead = data[start:node.start_byte].decode()
    return lead if not lead.strip() else re.match(r"\s*", lead).group(0)


def _own_line(k: Kernel, node: Node) -> bool:
    data = k.tree.data
    return not data[line_start(data, node.start_byte):node.start_byte].strip()


class WarpReduction(Mechanism):
    NAME = "warp_reduction"
    DESCRIPTION = "warp-shuffle reductions (__shfl_xor_sync / __shfl_down_sync) instead of shared memory"
    PRECONDITIONS = {
        "layout": [{"condition": "with a full mask (0xffffffff) all 32 lanes of every warp reach the reduction "
                                 "together: the block size is a multiple of 32 and the call is not under a "
                                 "lane-divergent branch",
                    "fails_without": "undefined results or a hang: shuffles (and the __syncwarp of the shared "
                                     "version) wait for lanes that never arrive"},
                   {"condition": "offsets stay below the warp width (32), so partners are lanes of the same warp",
                    "fails_without": "the exchange would cross warps: a different reduction"}],
        "storage": [{"condition": "the shared-memory version needs blockDim <= 1024 slots of the value type "
                                  "(4 KB for fp32) of static shared memory per reduction",
                     "fails_without": "the deoptimized kernel exceeds the 48 KB static shared limit or loses "
                                      "occupancy"}],
        "hardware": [{"condition": "compute capability >= 3.0 (__shfl_*_sync needs CUDA 9, sm_30+)",
                      "fails_without": "no register shuffle: shared memory is the only exchange path"}],
    }

    def detect(self, k: Kernel) -> list[Feature]:
        out = []
        for locus, r in _reductions(k):
            out.append(Feature(self.NAME, locus, (k.lines(r.first)[0], k.lines(r.loop or r.stmts[-1])[1]),
                               anchor="warp reduction",
                               detail=detail(shuffle=f"__{r.kind}_sync", form=r.form, steps=len(r.stmts)
                                             if r.form == "unrolled" else "loop", mask=r.mask),
                               path=node_path(k.tree, r.loop or r.stmts[0])))
        return out

    def detect_more(self, k: Kernel) -> list[Feature]:
        return _other_forms(k, [f.lines for f in self.detect(k)], self.NAME)

    def compiled(self, ck) -> list:
        """Reduction steps over shuffles (see _reduction_shuffles) and hardware warp reductions (redux.sync)."""
        out = []
        for fn in ck.module.functions:
            steps = [(s, [s, *c]) for s, c in _reduction_shuffles(ck, fn)]
            steps += [(i, [i]) for i in fn.instrs if i.op == "redux"]
            for s, instrs in steps:
                site = ck.site(self.NAME, fn, [s], what=" + ".join(dict.fromkeys(i.opcode for i in instrs)))
                if site is not None:
                    out.append(site)
        return out

    def deoptimize(self, k: Kernel, feature: Feature):
        r = dict(_reductions(k)).get(feature.locus)
        if r is None:
            return NotApplicable(f"no warp-shuffle reduction at {feature.locus}")
        if r.width is not None and r.width not in ("32", "warpSize", "WARP_SIZE"):
            return NotApplicable(f"shuffle width {r.width}: only whole-warp (width 32) exchanges are rewritten")
        if not re.fullmatch(r"[\w~\-]+", r.mask.replace(" ", "")):
            return NotApplicable(f"mask `{r.mask}` is not a constant or a variable (it would be evaluated twice)")
        if not re.fullmatch(r"[A-Za-z_]\w*", r.var):
            return NotApplicable(f"reduced value `{r.var}` is not a plain variable")
        d = declared(k, r.var, r.stmts[0])
        if d is None or d.pointers or d.array or d.reference:
            return NotApplicable(f"cannot tell the scalar type of `{r.var}`")
        vtype = " ".join(w for w in d.type.split() if w not in ("const", "volatile", "register", "static"))
        first = r.first
        if first.parent is None or first.parent.type not in (
                "compound_statement", "preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif"):
            return NotApplicable("the reduction is the body of another statement: no room for the buffer declaration")
        b, t = _names(k, r.fn)
        sync = _sync(r.mask)
        d1 = f"__shared__ {vtype} {b}[1024];"
        d2 = f"const unsigned int {t} = {_LINEAR_TID};"
        data = k.tree.data
        lines_mode = _own_line(k, first)
        if lines_mode:
            indent = _indent_of(k, r.loop or r.stmts[0])
            decl_at = line_start(data, first.start_byte)
            decl = f"{indent}{d1}\n{indent}{d2}\n"
        else:
            decl_at = first.start_byte
            decl = f"{d1} {d2} "
        edits = [Edit(decl_at, decl_at, decl)]
        originals, replacements = [], []
        for stmt, call, off in zip(r.stmts, r.calls, r.offsets):
            rel = call.start_byte - stmt.start_byte, call.end_byte - stmt.start_byte
            sb = stmt.text  # bytes
            s_new = (sb[:rel[0]].decode() + _partner(r.kind, b, t, off) + sb[rel[1]:].decode())
            if r.loop is not None:
                rparen = [c for c in r.loop.children if c.type == ")"][-1]
                body = r.loop.child_by_field_name("body")
                start, end = rparen.end_byte, body.end_byte
                if lines_mode and _own_line(k, r.loop):
                    ind = _indent_of(k, r.loop)
                    in2 = ind + "    "
                    new = (f" {{\n{in2}{b}[{t}] = {r.var};\n{in2}{sync};\n{in2}{s_new}\n{in2}{sync};\n{ind}}}")
                else:
                    new = f" {{ {b}[{t}] = {r.var}; {sync}; {s_new} {sync}; }}"
            else:
                start, end = stmt.start_byte, stmt.end_byte
                new = f"{{ {b}[{t}] = {r.var}; {sync}; {s_new} {sync}; }}"
            originals.append(data[start:end].decode())
            replacements.append(new)
            edits.append(Edit(start, end, new))
        src = k.tree.edit(edits)
        region = (line_start(data, first.start_byte) if lines_mode else first.start_byte,
                  (r.loop or r.stmts[-1]).end_byte)
        delta = sum(len(e.text.encode()) - (e.end - e.start) for e in edits)
        before = data[region[0]:region[1]].decode()
        after = src.encode()[region[0]:region[1] + delta].decode()
        return Applied(src, self.NAME, feature.locus, before=before, after=after,
                       config={"function": r.function, "form": r.form, "kind": r.kind, "var": r.var,
                               "mask": r.mask, "buffer": b, "tid": t, "decl": decl,
                               "originals": originals, "replacements": replacements,
                               "type": vtype})

    def reoptimize(self, k: Kernel, locus: str | None = None, config: dict | None = None):
        config = config or {}
        groups = _canonical(k)
        if not groups:
            return NotApplicable("no shared-memory warp exchange in the canonical form "
                                 "(`{ buf[t] = v; __syncwarp(); ... buf[t ^ o] ...; __syncwarp(); }`)")
        pick = None
        if config.get("buffer"):
            pick = next((g for g in groups if g["function"] == config.get("function")
                         and g["b"] == config["buffer"]), None)
        elif locus:
            pick = next((g for g in groups if g["locus"] == locus.split("#")[0]), None)
        else:
            pick = groups[0]
        if pick is None:
            return NotApplicable(f"no canonical shared-memory warp exchange for {locus or config.get('buffer')}")
        exact = config.get("originals") and len(config["originals"]) == len(pick["blocks"])
        mask = config.get("mask") or (pick["m"] or "0xffffffffu")
        edits, restored = [], []
        for i, (blk, s_nat) in enumerate(zip(pick["blocks"], pick["naturals"])):
            s_nat = s_nat.replace("@MASK@", mask)
            if pick["loop"] is not None:
                rparen = [c for c in pick["loop"].children if c.type == ")"][-1]
                start, end = rparen.end_byte, blk.end_byte
                text = config["originals"][i] if exact else " " + s_nat
            else:
                start, end = blk.start_byte, blk.end_byte
                text = config["originals"][i] if exact else s_nat
            edits.append(Edit(start, end, text))
            restored.append(text)
        fn, b, t = pick["fn"], pick["b"], pick["t"]
        skip = [(e.start, e.end) for e in edits]
        uses = [n for n in walk(fn) if n.type == "identifier" and n.text.decode() in (b, t)
                and not any(s <= n.start_byte < e for s, e in skip)]
        db = next((n for n in walk(fn) if n.type == "declaration" and _declares(n, b)), None)
        dt = next((n for n in walk(fn) if n.type == "declaration" and _declares(n, t)), None)
        removed = False
        if db is not None and dt is not None and db.end_byte <= dt.start_byte:
            in_decls = [n for n in uses if db.start_byte <= n.start_byte < db.end_byte
                        or dt.start_byte <= n.start_byte < dt.end_byte]
            if len(uses) == len(in_decls):
                edits.append(_decl_removal(k, db, dt))
                removed = True
        src = k.tree.edit(edits)
        out_locus = locus
        if out_locus is None:
            at = edits[0].start
            at += sum(len(e.text.encode()) - (e.end - e.start) for e in edits if e.end <= at and e is not edits[0])
            line = src.encode()[:at].count(b"\n") + 1
            feats = [f for f in self.detect(Kernel(src)) if f.locus.startswith(pick["function"] + ":")]
            out_locus = next((f.locus for f in feats if f.lines[0] <= line <= f.lines[1]),
                             feats[0].locus if feats else pick["locus"])
        return Applied(src, self.NAME, out_locus,
                       before="\n".join(k.tree.text_of(x) for x in pick["blocks"]), after="\n".join(restored),
                       config={"function": pick["function"], "kind": pick["kind"], "mask": mask,
                               "dropped_buffer": removed})


def _declares(decl: Node, name: str) -> bool:
    return any(n == name for n, *_ in declarators(decl))


def _decl_removal(k: Kernel, db: Node, dt: Node) -> Edit:
    """The buffer and thread-index declarations: their whole lines, or the inline text and one space."""
    data = k.tree.data
    start = line_start(data, db.start_byte)
    nl = data.find(b"\n", dt.end_byte)
    if not data[start:db.start_byte].strip() and nl >= 0 and not data[dt.end_byte:nl].strip():
        return Edit(start, nl + 1, "")
    end = dt.end_byte + (1 if data[dt.end_byte:dt.end_byte + 1] == b" " else 0)
    return Edit(db.start_byte, end, "")


def _canonical(k: Kernel) -> list[dict]:
    """Canonical shared-buffer warp exchanges, grouped into reductions (a loop, or a run of blocks)."""
    found = []
    for blk in walk(k.tree.root):
        if blk.type != "compound_statement" or not k.live(blk):
            continue
        m = _CANON.fullmatch(squash(k.tree.text_of(blk)))
        if not m:
            continue
        fn = device_function(blk)
        if fn is None:
            continue
        b, t, v, s = (re.escape(m.group(x)) for x in "btvs")
        s_text = m.group("s")
        xor = re.search(rf"{b}\[{t} \^ {_OPERAND}\]", s_text)
        down = re.search(rf"{b}\[\({t} & 31\) \+ {_OPERAND} < 32 \? {t} \+ (?P=o) : {t}\]", s_text)
        hit, kind = (xor, "shfl_xor") if xor else (down, "shfl_down")
        if hit is None:
            continue
        o = hit.group("o")
        o = o[1:-1] if o.startswith("(") and o.endswith(")") else o
        nat = s_text[:hit.start()] + f"__{kind}_sync(@MASK@, {m.group('v')}, {o})" + s_text[hit.end():]
        parent = blk.parent
        loop = parent if parent is not None and parent.type == "for_statement" and \
            parent.child_by_field_name("body") == blk else None
        found.append(dict(blk=blk, fn=fn, b=m.group("b"), t=m.group("t"), v=m.group("v"), m=m.group("m"),
                          kind=kind, nat=nat, loop=loop))
    groups: list[dict] = []
    for f in found:
        g = groups[-1] if groups else None
        if (f["loop"] is None and g is not None and g["loop"] is None and g["b"] == f["b"]
                and g["kind"] == f["kind"] and _next_stmt(g["blocks"][-1]) == f["blk"]):
            g["blocks"].append(f["blk"])
            g["naturals"].append(f["nat"])
            continue
        fname = syntax.function_name(f["fn"])
        step = squash(f["nat"].replace("@MASK@", f["m"] or "0xffffffffu")).rstrip(";")
        groups.append(dict(fn=f["fn"], function=fname, b=f["b"], t=f["t"], m=f["m"], kind=f["kind"],
                           loop=f["loop"], blocks=[f["blk"]], naturals=[f["nat"]],
                           locus=f"{fname}:{f['kind']}:{step}"))
    return groups


FAMILY = Family(
    WarpReduction, rank=90,
    forms=(
        Form("a loop over lane offsets below 32 (or an unrolled run of literal offsets) whose body is one step v "
             "OP= __shfl_xor_sync / __shfl_down_sync(mask, v, o)"),
        Form("cooperative-groups reduce and the hardware __reduce_*_sync", rewritable=False),
        Form("offset loops with several statements, tile member shuffles, macros over the intrinsics, and unrolled "
             "runs of such steps", rewritable=False),
    ),
    compiler="reduction steps over shuffles (shfl.sync feeding the combine) and redux.sync",
    forward=("reoptimize", "shape"),
    anchor_query='(call_expression function: (identifier) @callee (#match? @callee "^__shfl_(xor|down)_sync$"))',
    addresses=frozenset({"latency", "memory"}),
    rules=("warp_mask", "dtype_intrinsics"),
    hardware=("warp reduce",),
)
