"""The structural edits of the scalar form: the combine functions, a row shared by a warp or a block,
combines through shuffles, and the online (running max and sum) pass."""
from __future__ import annotations

import re

from klineage.mechanisms.base import Kernel, squash
from klineage.mechanisms.elementwise import _balanced, _norm
from klineage.mechanisms.shapes.rowwise.model import (_BLOCK_ROW, _EXP_FNS, _FLOATING, _LINE_DECL, _LINE_NOTE, _NA,
                                                      _WARP_ROW, BLOCK, DEFAULT_THREADS, WARP, Online, Pass, Row,
                                                      _line_row, _line_start, _team)
from klineage.mechanisms.shapes.rowwise.read import _code, _combine_lines, _kernels, read_row
from klineage.parse import syntax
from klineage.parse.syntax import Edit

# ---------------------------------------------------------------- the combines

def _combine_expr(op: str, fn: str, a: str, b: str) -> str:
    return f"{a} + {b}" if op == "sum" else f"{fn}({a}, {b})"


def _helper(op: str, ctype: str, fn: str, gran: str, combine: str) -> str:
    name, u = f"kl_row_{op}", "    "
    head = f"__device__ __forceinline__ {ctype} {name}({ctype} v) {{"
    step = ("v += __shfl_xor_sync(0xffffffffu, v, o);" if op == "sum"
            else f"v = {fn}(v, __shfl_xor_sync(0xffffffffu, v, o));")
    if gran == "warp" and combine == "tree":
        body = ["// the warp's 32 lanes meet in a shared-memory tree (the warp's own 32 slots)",
                f"__shared__ {ctype} kl_tree[1024];", f"{ctype}* s = kl_tree + (threadIdx.x & ~31u);",
                "const unsigned lane = threadIdx.x & 31u;", "s[lane] = v;", "__syncwarp();",
                "for (unsigned o = 16; o > 0; o >>= 1) {",
                f"{u}if (lane < o) s[lane] = {_combine_expr(op, fn, 's[lane]', 's[lane + o]')};",
                f"{u}__syncwarp();", "}", "v = s[0];", "__syncwarp();", "return v;"]
    elif gran == "block" and combine == "tree":
        body = ["// the block's threads meet in a shared-memory tree (blockDim.x a power of two)",
                f"__shared__ {ctype} kl_tree[1024];", "const unsigned t = threadIdx.x;", "kl_tree[t] = v;",
                "__syncthreads();", "for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {",
                f"{u}if (t < o) kl_tree[t] = {_combine_expr(op, fn, 'kl_tree[t]', 'kl_tree[t + o]')};",
                f"{u}__syncthreads();", "}", "v = kl_tree[0];", "__syncthreads();", "return v;"]
    elif gran == "line" and combine == "tree":
        body = ["// a line's threads (one lane of each warp) meet in a shared-memory tree across the warps",
                "// (blockDim.x / 32 a power of two); every thread gets its line's result",
                f"__shared__ {ctype} kl_tree[1024];", "const unsigned t = threadIdx.x;", "kl_tree[t] = v;",
                "__syncthreads();", "for (unsigned o = blockDim.x / 2; o >= 32; o >>= 1) {",
                f"{u}if (t < o) kl_tree[t] = {_combine_expr(op, fn, 'kl_tree[t]', 'kl_tree[t + o]')};",
                f"{u}__syncthreads();", "}", "v = kl_tree[t % 32];", "__syncthreads();", "return v;"]
    elif gran == "line":
        raise _NA("a line's threads are one lane of each warp: no warp shuffle reaches them (the combine stays a "
                  "shared-memory tree)")
    elif gran == "warp":
        body = ["// the warp's 32 lanes combine in registers: a butterfly of shuffles, every lane gets the result",
                f"for (int o = 16; o > 0; o >>= 1) {step}", "return v;"]
    else:
        body = ["// each warp combines in registers (a butterfly of shuffles), then the warps' partials through",
                "// shared memory; every thread gets the result", f"for (int o = 16; o > 0; o >>= 1) {step}",
                f"__shared__ {ctype} kl_part[32];", "if ((threadIdx.x & 31u) == 0) kl_part[threadIdx.x >> 5] = v;",
                "__syncthreads();", "v = kl_part[0];",
                f"for (unsigned w = 1; w < blockDim.x / 32; ++w) v = {_combine_expr(op, fn, 'v', 'kl_part[w]')};",
                "__syncthreads();", "return v;"]
    return head + "\n" + "\n".join(u + b for b in body) + "\n}\n\n"


def _with_helpers(source: str, gran: str, combine: str) -> str:
    """`source` with the combine functions its passes need, written for `gran` and `combine`."""
    row = read_row(source)
    k = Kernel(source)
    data = k.tree.data
    edits = [Edit(s, e + (1 if data[e:e + 1] == b"\n" else 0), "") for s, e in row.helpers]
    text = "".join(_helper(op, t, fn, gran, combine) for op, t, fn in row.ops) if gran != "thread" else ""
    edits.append(Edit(row.fn_start, row.fn_start, text))
    return syntax.apply_edits(source, edits)


# ---------------------------------------------------------------- the structural edits of the scalar form

def _threads(row: Row, gran: str, config: dict) -> int:
    """Threads per block for `gran` from the card's measured configurations (role "block"; names with
    WARP preferred for a warp per row, without for a block per row), clamped to the kernel's launch
    bounds; the default when the card names none."""
    vals = []
    for m in config.get("measured") or []:
        items = [it for it in m.get("values") or [] if it.get("role") == "block" and isinstance(it.get("value"), int)
                 and it.get("name") != "__launch_bounds__"]
        warp = [it for it in items if "WARP" in it["name"].upper()]
        other = [it for it in items if "WARP" not in it["name"].upper()]
        pick = (warp or other) if gran == "warp" else (other or warp)
        if pick:
            vals.append(pick[0]["value"])
    if config.get("threads"):
        vals = [int(config["threads"])]
    v = max(set(vals), key=lambda x: (vals.count(x), -x)) if vals else DEFAULT_THREADS[WARP if gran == "warp" else BLOCK]
    limit = row.bounds or 1024
    v = min(v, limit)
    if gran == "warp":
        v = max(32, v - v % 32)
    else:
        v = 1 << (v.bit_length() - 1)
    return max(64 if gran == "line" and limit >= 64 else 32, v)


def to_granularity(row: Row, gran: str, config: dict) -> str:
    """The thread-per-row kernel `row` with each row shared by a warp or a block; a strided row
    ("line") shared by the warps of a block, 32 neighbouring lines a block."""
    if row.gran != "thread":
        raise _NA(f"the row is already shared by a {row.gran}: this rewriter shares a thread's row only")
    if row.launch is None:
        raise _NA("the kernel is not launched once in this file with grid, block and every argument")
    data = row.source.encode()
    ind = row.body_indent
    if gran == "line":
        at = _line_start(data, row.row_decl[0])
        lead = data[at:row.row_decl[0]].decode()
        edits = [Edit(*row.row_init, _line_row(row.rows)),
                 Edit(at, at, (lead if not lead.strip() else "") + _LINE_DECL + _LINE_NOTE + "\n")]
    else:
        edits = [Edit(*row.row_init, _WARP_ROW if gran == "warp" else _BLOCK_ROW)]
    nl = data.find(b"\n", row.guard_end)
    edits.append(Edit(nl + 1, nl + 1, ind + _team(gran, row.rows) + "\n"))
    for p in row.passes:
        edits += [Edit(*p.init, "kl_t" if not p.first else f"kl_t + {p.first}"), Edit(*p.update, f"{p.var} += kl_n")]
        lines = _combine_lines(p)
        if lines:
            edits.append(Edit(p.end, p.end, "".join("\n" + p.indent + ln for ln in lines)))
    for s, _ in row.stores:
        edits.append(Edit(s, s, "if (kl_t == 0) "))
    threads = _threads(row, gran, config)
    lau = row.launch
    macro = lau.macro or f"{row.prefix}_ROW_THREADS"
    grid = (f"({lau.rows_arg} + {macro} / 32 - 1) / ({macro} / 32)" if gran == "warp"
            else f"({lau.rows_arg} + 31) / 32" if gran == "line" else lau.rows_arg)
    edits.append(Edit(*lau.grid, grid))
    if lau.block_edit is not None:
        edits.append(Edit(*lau.block_edit, macro))
    src = syntax.apply_edits(row.source, edits)
    src = _with_block_macro(src, row, macro, threads, gran, own=lau.macro is None)
    return _with_helpers(src, gran, "tree")


def _block_assert(macro: str, gran: str, limit: int) -> str:
    if gran == "warp":
        return (f'static_assert({macro} % 32 == 0 && {macro} >= 32 && {macro} <= {limit}, '
                f'"{macro} (threads per block) must be a multiple of 32 from 32 to {limit}");\n')
    if gran == "line":
        low = 64 if limit >= 64 else 32
        return (f'static_assert({macro} >= {low} && {macro} <= {limit} && ({macro} & ({macro} - 1)) == 0, '
                f'"{macro} (threads per block) must be a power of two from {low} to {limit}");\n')
    return (f'static_assert({macro} >= 32 && {macro} <= {limit} && ({macro} & ({macro} - 1)) == 0, '
            f'"{macro} (threads per block) must be a power of two from 32 to {limit}");\n')


def _with_block_macro(src: str, row: Row, macro: str, threads: int, gran: str, own: bool) -> str:
    note = ("threads per block: a warp per row, {m} / 32 rows a block" if gran == "warp"
            else "threads per block: 32 lines a block, {m} / 32 warps splitting each" if gran == "line"
            else "threads per block: a block per row").format(m=macro)
    line = f"#define {macro} {threads}  // {note}"
    assertion = _block_assert(macro, gran, row.bounds or 1024)
    if own:
        k = Kernel(src)
        fn = next(f for f in _kernels(k) if syntax.function_name(f) == row.kernel)
        at = len(k.tree.data[:_line_start(k.tree.data, fn.start_byte)].decode())
        return src[:at] + f"#ifndef {macro}\n{line}\n#endif\n" + assertion + src[at:]
    m = re.search(rf"^[ \t]*#[ \t]*define[ \t]+{macro}[ \t]+\d+[^\n]*$", src, re.M)
    if m is None:
        raise _NA(f"the block size {macro} is not a #define this rewriter can set")
    src = src[:m.start()] + line + src[m.end():]
    e = re.compile(r"^[ \t]*#[ \t]*endif[^\n]*\n", re.M).search(src, m.start())
    if e is None:
        raise _NA(f"{macro} is not inside #ifndef {macro} ... #endif")
    return src[:e.end()] + assertion + src[e.end():]


def to_shuffle(row: Row) -> str:
    """The cooperative kernel `row` with its combines through warp shuffles."""
    if row.gran == "thread":
        raise _NA("one thread per row: nothing to combine across threads (share the row with a warp or a "
                  "block first)")
    if row.combine == "shuffle":
        raise _NA("the combines are warp shuffles already")
    if row.gran == "line":
        raise _NA("a strided row's threads are one lane of each warp: no warp shuffle reaches them (the combine "
                  "stays a shared-memory tree)")
    return _with_helpers(row.source, row.gran, "shuffle")


_EXP_CALL = re.compile(r"(?P<e>\w+)\((?P<y>.+) - (?P<m>\w+)\)")


def to_online(row: Row) -> str:
    """The kernel `row` with a max pass and the following sum-of-exponentials pass fused into one
    pass with a running max and a rescaled running sum."""
    if any(p.online for p in row.passes):
        raise _NA("the kernel already has an online (running max and sum) pass")
    data = row.source.encode()
    for i, a in enumerate(row.passes[:-1]):
        b = row.passes[i + 1]
        if len(a.accs) != 1 or a.accs[0].op != "max" or len(b.accs) != 1 or b.accs[0].op != "sum":
            continue
        m, s = a.accs[0], b.accs[0]
        if a.writes or b.writes or m.ctype != s.ctype or m.ctype not in _FLOATING or a.first or b.first:
            continue
        ux, uy = _single_update(row, a, m), _single_update(row, b, s)
        if ux is None or uy is None or ux[1] != uy[1]:
            continue  # each pass one update, after the same index declarations
        (x, pre), y = ux, uy[0]
        ex = _EXP_CALL.fullmatch(y)
        if ex is None or ex["e"] not in _EXP_FNS or ex["m"] != m.name or re.search(
                rf"\b({re.escape(m.name)}|{re.escape(s.name)})\b", ex["y"]):
            continue
        gap_s = data.find(b"\n", a.combine_end) + 1
        gap_e = _line_start(data, b.start)
        gap = data[gap_s:gap_e].decode()
        if re.search(rf"\b{re.escape(m.name)}\b", _code(gap)):
            raise _NA(f"code between the max pass and the sum pass reads `{m.name}`")
        if any(st not in ("declaration",) for st in _statement_types(gap)):
            raise _NA("statements other than declarations between the max pass and the sum pass")
        one, zero = ("1.0f", "0.0f") if m.ctype == "float" else ("1.0", "0.0")
        yy = "kl_x" if _norm(ex["y"]) == _norm(x) else ex["y"]
        t, u, ind = m.ctype, "    ", a.indent
        body = pre + [f"const {t} kl_x = {x};", f"const {t} kl_m = {m.fn}({m.name}, kl_x);",
                f"{s.name} = {s.name} * ({m.name} == kl_m ? {one} : {ex['e']}({m.name} - kl_m)) + "
                f"(kl_m == -INFINITY ? {zero} : {ex['e']}({yy} - kl_m));", f"{m.name} = kl_m;"]
        loop = data[a.start:a.header_end].decode() + " {\n" + "".join(f"{ind}{u}{ln}\n" for ln in body) + f"{ind}}}"
        merged = Pass(0, 0, 0, a.var, a.vtype, a.cond, (0, 0), (0, 0), (0, 0), [],
                      Online(m.name, s.name, t, m.fn, ex["e"], x, "" if yy == "kl_x" else yy), [], ind)
        combine = "".join("\n" + ind + ln for ln in _combine_lines(merged)) if row.gran != "thread" else ""
        end = b.combine_end if row.gran != "thread" else b.end
        new = gap + ind + loop + combine
        src = syntax.apply_edits(row.source, [Edit(_line_start(data, a.start), end, new)])
        return _with_helpers(src, row.gran, row.combine or "tree") if row.gran != "thread" else src
    raise _NA("no pass taking the row's max followed by a pass summing exp(y - max) (a softmax's or a "
              "logsumexp's two passes)")


def _single_update(row: Row, p: Pass, acc) -> tuple[str, list[str]] | None:
    """For a pass whose body is declarations (the same in the passes fused: `int loc = r * n + c;`)
    then the one statement updating the accumulator `acc`: (its operand, the declarations' lines).
    The operand is x of `m = fmaxf(m, x)` or of `if (x > m) m = x;`, e of `s += e` / `s = s + e`."""
    k = Kernel("void kl_probe() {\n" + row.source.encode()[p.body[0]:p.body[1]].decode() + "\n}\n")
    fn = syntax.functions(k.tree)
    if not fn:
        return None
    body = fn[0].child_by_field_name("body").named_children
    if len(body) == 1 and body[0].type == "compound_statement":
        body = body[0].named_children
    body = [n for n in body if n.type != "comment"]
    if not body or any(n.type != "declaration" or re.search(rf"\b{re.escape(acc.name)}\b", k.tree.text_of(n))
                       for n in body[:-1]):
        return None
    pre = [squash(k.tree.text_of(n)) for n in body[:-1]]
    text = squash(k.tree.text_of(body[-1]))
    a = re.escape(acc.name)
    cond = re.fullmatch(rf"if \((?P<e>.+) > {a}\) (?:\{{ )?{a} = (?P<v>.+?);(?: \}})?", text)
    if cond and _balanced(cond["e"]) and _norm(cond["e"]) == _norm(cond["v"]) and acc.op == "max":
        return cond["e"], pre
    if text.count(";") != 1:
        return None
    text = text.rstrip(";").strip()
    for pat in (rf"{a} \+= (?P<e>.+)", rf"{a} = {a} \+ (?P<e>.+)", rf"{a} = \w+\({a}, (?P<e>.+)\)"):
        mm = re.fullmatch(pat, text)
        if mm and _balanced(mm["e"]):
            return mm["e"], pre
    return None


def _statement_types(text: str) -> list[str]:
    k = Kernel("void kl_probe() {\n" + text + "\n}\n")
    fn = syntax.functions(k.tree)
    if not fn:
        return ["?"]
    return [c.type for c in fn[0].child_by_field_name("body").named_children if c.type != "comment"]
