"""Staging a reused operand in shared memory: the block copies a slice of a global array into a
`__shared__` buffer once, synchronises, and then every thread reads the (many times reused)
values from shared memory instead of from global memory / L2.

Detected (1-D canonical form): a `__shared__ T s[N];` declared in the function, a cooperative copy
`for (int i = threadIdx.x; i < N; i += blockDim.x) s[i] = g[base + i];` (or the one element per
thread form `s[threadIdx.x] = g[base + threadIdx.x];`, optionally under an `if` guard), followed
in the same block by `__syncthreads();`, and reads `s[e]` after it. The load may also be written
`*(g + idx)` or through a cache hint / vector-access helper (`__ldg(g + idx)`); the index may be
`base + i`, `i + base` or `i`. Locus: function, `stage` and the shared array (`k:stage:s_x`).

Deoptimize (canonical form only) rewrites every read `s[e]` into the load it stands for,
`g[base + (e)]`, and removes the copy, the shared declaration and the barrier, the latter only
when it served nothing else (no other shared variable in the function, no other store before
it); NotApplicable when `g` (or a variable of `base`) is written in the function, when the array is
used other than by the copy and plain reads, when the element types differ, or when a staging
statement shares its line with other code. Reoptimize is the exact inverse and needs the
configuration (which reads were rewritten, and where the statements went): choosing what to
stage, its extent and base is not mechanical on natural code. The forms seen but not rewritten,
and the compiled evidence, are read in seen.py.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


from klineage.mechanisms.base import Applied, Family, Feature, Form, Kernel, Mechanism, NotApplicable, detail
from klineage.mechanisms.families.smem_staging.seen import _LOAD_CALLS, _other_stagings, _staged_buffers
from klineage.mechanisms.vector_forms import declarators, declared, device_function, line_start, paren, \
    statement_of, strip_parens
from klineage.parse import syntax
from klineage.parse.ptx import variable_name as ptx_name
from klineage.parse.syntax import Edit, Node, node_path, walk

_BLOCKS = ("compound_statement", "preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif")
_TID = "threadIdx.x"


@dataclass
class _Stage:
    fn: Node
    function: str
    array: str
    decl: Node            # the __shared__ declaration
    copy: Node            # the statement that copies (loop, statement, or guarding if)
    assign: Node          # s[i] = LOAD
    var: str                 # loop variable or threadIdx.x
    load: Node            # LOAD
    index: Node           # the index of g inside LOAD (parentheses stripped)
    base: str | None
    base_first: bool
    glob: str
    sync: Node            # the __syncthreads(); after the copy
    form: str                # "loop" | "per-thread"
    extent: str


def _block_children(block: Node) -> list[Node]:
    return [c for c in block.named_children if c.type != "comment"]


def _is_sync(n: Node) -> bool:
    return n.type == "expression_statement" and re.fullmatch(r"__syncthreads\(\s*\);", n.text.decode()) is not None


def _single(body: Node | None) -> Node | None:
    if body is not None and body.type == "compound_statement":
        kids = _block_children(body)
        return kids[0] if len(kids) == 1 else None
    return body


def _copy_statement(k: Kernel, stmt: Node, dst_index: str):
    """(copy statement, variable, form) for `s[x] = ...;` in a cooperative copy, else None."""
    p = stmt.parent
    holder = p.parent if p is not None and p.type == "compound_statement" and _single(p) == stmt else p
    if holder is not None and holder.type == "for_statement" and _single(holder.child_by_field_name("body")) == stmt:
        init = holder.child_by_field_name("initializer")
        cond = holder.child_by_field_name("condition")
        upd = holder.child_by_field_name("update")
        if init is None or cond is None or upd is None:
            return None
        m = re.fullmatch(r"(?:[\w ]+ )?(\w+) = threadIdx\.x;?", _sq(k, init))
        if not m or m.group(1) != dst_index:
            return None
        var = m.group(1)
        if not re.fullmatch(rf"{var} < .+", _sq(k, cond)) or not re.fullmatch(rf"{var} \+= .+", _sq(k, upd)):
            return None
        return holder, var, "loop"
    if dst_index != _TID:
        return None
    if holder is not None and holder.type == "if_statement" and \
            _single(holder.child_by_field_name("consequence")) == stmt and \
            holder.child_by_field_name("alternative") is None:
        return holder, _TID, "per-thread"
    return stmt, _TID, "per-thread"


def _sq(k: Kernel, n: Node) -> str:
    return re.sub(r"\s+", " ", k.tree.text_of(n)).strip()


def _global_index(k: Kernel, load: Node):
    """(g identifier, index node) of a load `g[idx]`, `*(g + idx)`, `hint(g + idx)`, `hint(&g[idx])`."""
    e = strip_parens(load)
    if e.type == "subscript_expression":
        arr = e.child_by_field_name("argument")
        idx = [c for c in e.child_by_field_name("indices").named_children if c.type != "comment"]
        if arr.type == "identifier" and len(idx) == 1:
            return arr.text.decode(), idx[0]
        return None
    ptr = None
    if e.type == "pointer_expression" and e.child_by_field_name("operator").type == "*":
        ptr = strip_parens(e.child_by_field_name("argument"))
    elif e.type == "call_expression":
        callee = e.child_by_field_name("function")
        argv = [a for a in e.child_by_field_name("arguments").named_children if a.type != "comment"]
        if callee.type == "identifier" and _LOAD_CALLS.fullmatch(callee.text.decode()) and len(argv) == 1:
            ptr = strip_parens(argv[0])
            if ptr.type == "pointer_expression" and ptr.child_by_field_name("operator").type == "&":
                return _global_index(k, ptr.child_by_field_name("argument"))
    if ptr is not None and ptr.type == "binary_expression" and ptr.child_by_field_name("operator").type == "+":
        left = ptr.child_by_field_name("left")
        if left.type == "identifier":
            return left.text.decode(), ptr.child_by_field_name("right")
    return None


def _shared_decl(k: Kernel, name: str, use: Node):
    d = declared(k, name, use)
    if d is None or d.node.type != "declaration":
        return None
    if not any(c.type == "type_qualifier" and c.text == b"__shared__" for c in d.node.children):
        return None
    return d


def _stages(k: Kernel) -> list[tuple[str, _Stage]]:
    out = []
    for caps in k.tree.matches("staging_copies"):
        stmt, assign = caps["stmt"][0], caps["assign"][0]
        fn = device_function(stmt)
        if fn is None or not k.live(stmt):
            continue
        s = caps["dst"][0].text.decode()
        d = _shared_decl(k, s, stmt)
        if d is None or syntax.enclosing_function(d.node) != fn:
            continue
        arrays = list(d.node.children_by_field_name("declarator"))
        if len(arrays) != 1 or arrays[0].type != "array_declarator" or \
                arrays[0].child_by_field_name("declarator").type != "identifier":
            continue  # 1-D only
        dst_index = _sq(k, caps["dst_index"][0])[1:-1].strip()
        copy = _copy_statement(k, stmt, dst_index)
        if copy is None:
            continue
        copy_stmt, var, form = copy
        gi = _global_index(k, caps["src"][0])
        if gi is None:
            continue
        g, idx = gi
        if _shared_decl(k, g, stmt) is not None:
            continue
        e = strip_parens(idx)
        base, base_first = None, True
        if _sq(k, e) != var:
            if e.type != "binary_expression" or e.child_by_field_name("operator").type != "+":
                continue
            left, right = e.child_by_field_name("left"), e.child_by_field_name("right")
            if _sq(k, right) == var:
                base = k.tree.text_of(left)
            elif _sq(k, left) == var:
                base, base_first = k.tree.text_of(right), False
            else:
                continue
            if re.search(rf"\b{re.escape(var)}\b", base) and var != _TID:
                continue
        sync = None
        sib = copy_stmt.next_named_sibling
        while sib is not None:
            if _is_sync(sib):
                sync = sib
                break
            sib = sib.next_named_sibling
        if sync is None or _rewritten(fn, s, assign):
            continue
        out.append((f"{syntax.function_name(fn)}:stage:{s}",
                    _Stage(fn, syntax.function_name(fn), s, d.node, copy_stmt, assign, var, caps["src"][0], e,
                           base, base_first, g, sync, form,
                           k.tree.text_of(arrays[0].child_by_field_name("size")))))
    return out


def _rewritten(fn: Node, array: str, copy: Node) -> bool:
    """The shared array is folded onto itself after the copy (`s[t] += s[t + h]`, `s[i] = f(s[j])`: a
    tree reduction or a scan working in place, not a staged operand)."""
    reads = re.compile(rf"\b{re.escape(array)}\s*\[")
    for n in walk(fn):
        if n.start_byte <= copy.end_byte:
            continue
        if n.type == "update_expression" and _root(n.child_by_field_name("argument")) == array:
            return True
        if n.type == "assignment_expression" and _root(n.child_by_field_name("left")) == array:
            op = n.child_by_field_name("operator")
            if (op is not None and op.type != "=") or reads.search(n.child_by_field_name("right").text.decode()):
                return True
    return False


def _root(n: Node | None) -> str | None:
    while n is not None and n.type != "identifier":
        if n.type in ("subscript_expression", "field_expression", "pointer_expression", "parenthesized_expression",
                      "update_expression", "cast_expression"):
            n = (n.child_by_field_name("argument") or n.child_by_field_name("value")
                 or (n.named_children[0] if n.named_children else None))
        elif n.type == "binary_expression":
            n = n.child_by_field_name("left")
        else:
            return None
    return n.text.decode() if n is not None else None


def _written(k: Kernel, fn: Node, name: str, skip: Node | None = None) -> bool:
    """`name` (or memory through it) is assigned, incremented, or atomically updated in `fn`."""
    for n in walk(fn):
        if skip is not None and skip.start_byte <= n.start_byte < skip.end_byte:
            continue
        if n.type == "assignment_expression" and _root(n.child_by_field_name("left")) == name:
            return True
        if n.type == "update_expression" and _root(n.child_by_field_name("argument")) == name:
            return True
        if n.type == "call_expression":
            callee = n.child_by_field_name("function")
            argv = [a for a in n.child_by_field_name("arguments").named_children if a.type != "comment"]
            if callee.type == "identifier" and callee.text.decode().startswith("atomic") and argv and \
                    _root(argv[0]) == name:
                return True
    return False


def _type_key(t: str) -> str:
    words = [w for w in t.replace("*", " ").split() if w not in (
        "const", "volatile", "__shared__", "__restrict__", "__restrict", "static", "extern")]
    return " ".join(words)


def _span(k: Kernel, node: Node) -> tuple[int, int] | None:
    """Whole lines of a statement (a trailing comment included), or None if it shares a line."""
    data = k.tree.data
    start = line_start(data, node.start_byte)
    if data[start:node.start_byte].strip():
        return None
    if data[node.end_byte - 1:node.end_byte] == b"\n":  # preprocessor lines end with their newline
        return start, node.end_byte
    nl = data.find(b"\n", node.end_byte)
    nl = len(data) if nl < 0 else nl
    rest = data[node.end_byte:nl].strip()
    if rest and not (rest.startswith(b"//") or (rest.startswith(b"/*") and rest.endswith(b"*/"))):
        return None
    return start, min(nl + 1, len(data))


def _path_of(fn: Node, node: Node) -> list[int]:
    path = []
    n = node
    body = fn.child_by_field_name("body")
    while n is not None and n != body:
        parent = n.parent
        path.append(parent.named_children.index(n))
        n = parent
    return list(reversed(path))


def _at_path(fn: Node, path: list[int]) -> Node | None:
    n = fn.child_by_field_name("body")
    for i in path:
        kids = n.named_children
        if i >= len(kids):
            return None
        n = kids[i]
    return n


def _sync_only_for_staging(k: Kernel, st: _Stage, shared_names: set[str]) -> bool:
    others = shared_names - {st.array}
    for n in walk(st.fn):
        if n.type == "identifier" and n.text.decode() in others:
            return False
        if n.start_byte >= st.sync.start_byte:
            continue
        if st.copy.start_byte <= n.start_byte < st.copy.end_byte:
            continue
        if n.type == "assignment_expression" and n.child_by_field_name("left").type != "identifier":
            return False
        if n.type == "update_expression" and n.child_by_field_name("argument").type != "identifier":
            return False
        if n.type == "call_expression" and n.child_by_field_name("function").text.decode().startswith("atomic"):
            return False
    return True


def _shared_names(k: Kernel) -> set[str]:
    names = set()
    for caps in k.tree.matches("shared_decls"):
        names.update(n for n, *_ in declarators(caps["decl"][0]))
    return names


class SmemStaging(Mechanism):
    NAME = "smem_staging"
    DESCRIPTION = "staging a reused global operand in shared memory (copy once, __syncthreads, reuse)"
    PRECONDITIONS = {
        "storage": [{"condition": "the staged slice fits the shared-memory budget next to the kernel's other "
                                  "shared data (48 KB static per block)",
                     "fails_without": "ptxas rejects the kernel, or occupancy drops"},
                    {"condition": "the global operand is not written while the kernel runs",
                     "fails_without": "reads of the staged copy return stale values"}],
        "layout": [{"condition": "every read index falls inside the copied range [0, N)",
                    "fails_without": "reads outside it see uninitialised shared memory"}],
        "pipeline": [{"condition": "every thread of the block reaches the __syncthreads() after the copy",
                      "fails_without": "a deadlock, or reads before the copy has landed"},
                     {"condition": "the copy loop strides by the block size (blockDim.x)",
                      "fails_without": "parts of the buffer are never filled"}],
    }

    def detect(self, k: Kernel) -> list[Feature]:
        out = [Feature(self.NAME, locus, k.lines(st.copy), anchor="shared staging",
                       detail=detail(array=st.array, source=st.glob, form=st.form, extent=st.extent),
                       path=node_path(k.tree, st.copy))
               for locus, st in _stages(k)]
        return out

    def detect_more(self, k: Kernel) -> list[Feature]:
        return _other_stagings(k, {f.locus for f in self.detect(k)}, self.NAME)

    def compiled(self, ck) -> list:
        """Shared arrays staging a global operand, from data flow (see _staged_buffers): one site per
        array, at its staging stores and its reads."""
        out = []
        for fn in ck.module.functions:
            for name, (stores, reads) in _staged_buffers(ck, fn).items():
                site = ck.site(self.NAME, fn, stores + reads, what=f"st.shared {ptx_name(name)} <- ld.global; "
                                                                   f"ld.shared -> compute")
                if site is not None:
                    out.append(site)
        return out

    def deoptimize(self, k: Kernel, feature: Feature):
        st = dict(_stages(k)).get(feature.locus)
        if st is None:
            return NotApplicable(f"no shared-memory staging at {feature.locus}")
        # the array is only declared, filled by the copy and read
        reads = []
        scope = st.copy.parent
        for n in walk(st.fn):
            if n.type != "identifier" or n.text.decode() != st.array:
                continue
            if st.decl.start_byte <= n.start_byte < st.decl.end_byte:
                continue
            if st.assign.start_byte <= n.start_byte < st.assign.child_by_field_name("left").end_byte:
                continue
            sub = n.parent
            if sub is None or sub.type != "subscript_expression" or sub.child_by_field_name("argument") != n:
                return NotApplicable(f"`{st.array}` is used other than by element reads (line "
                                     f"{n.start_point.row + 1})")
            p = sub.parent
            while p is not None and p.type == "parenthesized_expression":
                p = p.parent
            if p is not None and ((p.type == "assignment_expression" and p.child_by_field_name("left") in (sub, n))
                                  or p.type == "update_expression"
                                  or (p.type == "pointer_expression" and p.child_by_field_name("operator").type == "&")):
                return NotApplicable(f"`{st.array}` is written or its address taken at line "
                                     f"{n.start_point.row + 1}")
            if not (scope.start_byte <= sub.start_byte < scope.end_byte and sub.start_byte >= st.copy.end_byte):
                return NotApplicable(f"a read of `{st.array}` (line {n.start_point.row + 1}) is not after the copy "
                                     f"in its block")
            reads.append(sub)
        if not reads:
            return NotApplicable(f"`{st.array}` is never read")
        for a in reads:
            if any(b is not a and a.start_byte <= b.start_byte < a.end_byte for b in reads):
                return NotApplicable(f"nested reads of `{st.array}`")
        gdecl = declared(k, st.glob, st.assign)
        if gdecl is None or gdecl.pointers != 1 or gdecl.array:
            return NotApplicable(f"cannot tell the type of `{st.glob}`")
        if not re.search(r"\bconst\b", gdecl.type) and _written(k, st.fn, st.glob):
            return NotApplicable(f"`{st.glob}` is written in {st.function}: the staged copy is not equivalent")
        stype = declared(k, st.array, st.assign).type
        if _type_key(stype) != _type_key(gdecl.type):
            return NotApplicable(f"`{st.array}` holds {_type_key(stype)} but `{st.glob}` points to "
                                 f"{_type_key(gdecl.type)}: the copy converts")
        if st.base:
            base_node = next(c for c in walk(st.index) if k.tree.text_of(c) == st.base)
            for ident in (n for n in walk(base_node) if n.type == "identifier"):
                name = ident.text.decode()
                if name not in ("threadIdx", "blockIdx", "blockDim", "gridDim") and _written(k, st.fn, name):
                    return NotApplicable(f"`{name}` of the base `{st.base}` changes in {st.function}")
            if st.var == _TID and "threadIdx" in st.base:
                return NotApplicable(f"the base `{st.base}` depends on the thread index")
        # statements to remove, as whole lines
        pragma = st.copy.prev_named_sibling
        copy_first = pragma if (pragma is not None and pragma.type == "preproc_call" and
                                pragma.text.decode().lstrip().startswith("#pragma") and
                                pragma.end_point.row + 1 >= st.copy.start_point.row) else st.copy
        remove_sync = _sync_only_for_staging(k, st, _shared_names(k))
        removed = [st.decl, copy_first] + ([st.sync] if remove_sync else [])
        spans = []
        for node in removed:
            last = st.copy if node is copy_first else node
            a, b = _span(k, node), _span(k, last)
            if a is None or b is None:
                return NotApplicable(f"`{k.tree.text_of(node).splitlines()[0]}` shares its line with other code")
            spans.append((a[0], b[1], node))
        spans.sort()
        groups: list[list] = []
        for a, b, node in spans:
            if groups and groups[-1][1] == a:
                groups[-1][1] = b
            else:
                groups.append([a, b, node])
        # read rewrites
        data = k.tree.data
        load_text = data[st.load.start_byte:st.load.end_byte]
        i0, i1 = st.index.start_byte - st.load.start_byte, st.index.end_byte - st.load.start_byte
        rewrites = []
        for sub in reads:
            e = [c for c in sub.child_by_field_name("indices").named_children if c.type != "comment"][0]
            et = paren(k.tree.text_of(e))
            idx = et if st.base is None else (f"{st.base} + {et}" if st.base_first else f"{et} + {st.base}")
            text = load_text[:i0].decode() + idx + load_text[i1:].decode()
            rewrites.append((sub, text))
        edits = [Edit(a, b, "") for a, b, _ in groups] + [Edit(s.start_byte, s.end_byte, t) for s, t in rewrites]
        try:
            new = k.tree.edit(edits)
        except Exception as exc:  # overlapping ranges: the form is not the canonical one
            return NotApplicable(f"staging statements overlap the reads: {exc}")

        def moved(pos: int) -> int:
            return pos + sum(len(e.text.encode()) - (e.end - e.start) for e in edits if e.end <= pos)

        nk = Kernel(new)
        nfn = next(f for f in syntax.functions(nk.tree) if syntax.function_name(f) == st.function
                   and f.start_byte == moved(st.fn.start_byte))
        anchors = []
        for a, b, node in groups:
            nxt = None
            for sib in _siblings_after(node.parent, b):
                if not any(ga <= sib.start_byte < gb for ga, gb, _ in groups):
                    nxt = sib
                    break
            if nxt is not None:
                target = next(n for n in walk(nfn) if n.start_byte == moved(nxt.start_byte) and n.type == nxt.type)
                anchors.append({"path": _path_of(nfn, target), "end": False})
            else:
                parent = next(n for n in walk(nfn) if n.start_byte == moved(node.parent.start_byte)
                              and n.type == node.parent.type)
                anchors.append({"path": _path_of(nfn, parent), "end": True})
        read_cfg = []
        for sub, text in rewrites:
            nstart = moved(sub.start_byte)
            same = [n for n in walk(nfn) if n.type == st.load.type and nk.tree.text_of(n) == text]
            nth = next(i for i, n in enumerate(same) if n.start_byte == nstart)
            read_cfg.append({"text": text, "original": k.tree.text_of(sub), "nth": nth})
        first_read = statement_of(reads[0])
        before = "\n".join(k.tree.text_of(n) for n in removed) + "\n" + k.tree.text_of(first_read)
        nread = next(n for n in walk(nfn) if n.start_byte == moved(reads[0].start_byte))
        after = nk.tree.text_of(statement_of(nread))
        return Applied(new, self.NAME, feature.locus, before=before, after=after,
                       config={"function": st.function, "array": st.array, "global": st.glob,
                               "base": st.base, "extent": st.extent, "form": st.form,
                               "removed": [data[a:b].decode() for a, b, _ in groups], "anchors": anchors,
                               "reads": read_cfg, "load_type": st.load.type, "sync_removed": remove_sync})

    def reoptimize(self, k: Kernel, locus: str | None = None, config: dict | None = None):
        config = config or {}
        if not config.get("removed") or not config.get("reads"):
            return NotApplicable("staging an operand needs the deoptimize configuration (array, extent, base, "
                                 "where the copy goes): not mechanical on natural code")
        fname = config["function"]
        fns = [f for f in syntax.functions(k.tree) if syntax.function_name(f) == fname]
        if not fns:
            return NotApplicable(f"no function {fname}")
        fn = fns[0]
        edits = []
        for text, anchor in zip(config["removed"], config["anchors"]):
            node = _at_path(fn, anchor["path"])
            if node is None:
                return NotApplicable(f"{fname} changed: no statement where `{text.strip().splitlines()[0]}` went")
            if anchor["end"]:
                close = node.children[-1]
                at = line_start(k.tree.data, close.start_byte)
            else:
                at = line_start(k.tree.data, node.start_byte)
            edits.append(Edit(at, at, text))
        by_text: dict[str, list[Node]] = {}
        for n in walk(fn):
            if n.type == config.get("load_type"):
                by_text.setdefault(k.tree.text_of(n), []).append(n)
        for r in config["reads"]:
            same = by_text.get(r["text"], [])
            if r["nth"] >= len(same):
                return NotApplicable(f"{fname} changed: `{r['text']}` is gone")
            n = same[r["nth"]]
            edits.append(Edit(n.start_byte, n.end_byte, r["original"]))
        new = k.tree.edit(edits)
        first = config["reads"][0]
        return Applied(new, self.NAME, locus or f"{fname}:stage:{config['array']}",
                       before=first["text"], after=first["original"],
                       config={"function": fname, "array": config["array"], "global": config.get("global"),
                               "extent": config.get("extent")})


def _siblings_after(parent: Node, pos: int):
    for c in parent.named_children:
        if c.start_byte >= pos:
            yield c


FAMILY = Family(
    SmemStaging, rank=100,
    forms=(
        Form("a 1-D __shared__ buffer filled by a cooperative copy from a global array, then __syncthreads, then "
             "read in place of the global loads"),
        Form("2-D tiles, copies by a strided loop or by edge threads (halos), dynamic extern __shared__ buffers, "
             "staged values read into arithmetic or an MMA load", rewritable=False),
    ),
    compiler="shared arrays staging a global operand: st.shared of ld.global values, then ld.shared into compute",
    forward=("reoptimize",),
    anchor_query='(declaration (type_qualifier) @q (array_declarator) (#eq? @q "__shared__"))',
    addresses=frozenset({"memory"}),
    rules=("shared_memory", "dtype_intrinsics"),
    # ladders name the tiled form of a GEMM or a convolution `smem_tiling`: the same operand staging
    covers=("smem_tiling",),
)
