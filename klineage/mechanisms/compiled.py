"""Compiler evidence: what nvcc generated for a kernel, read back to its source lines.

A `CompiledKernel` is one source compiled to PTX with line info (klineage.gate.compile.compile_ptx,
CPU only, cached) and read by klineage.parse.ptx. It answers, per PTX function, the evidence table
of instruction classes (shuffles by kind, shared loads / stores / barriers, global access widths and
cache operators, asynchronous and bulk copies, mbarriers, ldmatrix, MMA and wgmma, approximate math,
setmaxnreg, cluster operations, local-memory traffic) with ptxas's registers, shared bytes and
spills, and the data-flow questions the families' signatures ask (`values_from`, `values_to`,
`shared_symbols`).

Each family keeps its own signature beside its source detector (`Mechanism.compiled`): it returns
`Site`s, each an instruction (or group) attributed to the innermost line of the kernel's own file
along the `.loc` chain, and to the source function around that line; a site inside a `__device__`
helper names the helper and the lines it was inlined at.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import cached_property

from klineage.gate.compile import DEFAULT_ARCH, PtxResult, compile_ptx
from klineage.mechanisms.base import Kernel
from klineage.parse import ptx
from klineage.parse.ptx import Instr

# instructions that move a value without computing with it (value-preserving)
MOVES = ("mov", "cvt", "cvta", "prmt")
# instructions that combine values arithmetically
ARITH = ("add", "sub", "mul", "mad", "fma", "max", "min", "and", "or", "xor", "div", "rcp", "sqrt", "rsqrt", "ex2",
         "lg2", "sin", "cos", "tanh", "neg", "abs", "dp4a", "dp2a", "set", "setp", "selp", "shl", "shr", "copysign",
         "mma", "wmma", "wgmma", "testp", "cvt.rn", "lop3", "shf", "bfe", "bfi", "popc", "clz", "brev")
_CACHE_OPS = ("ca", "cg", "cs", "lu", "cv", "wb", "wt")


@dataclass(frozen=True)
class Site:
    """One piece of compiler evidence for a mechanism, at source lines of the kernel's file."""
    mechanism: str
    function: str                 # the source function around the innermost line
    lines: tuple[int, ...]        # innermost line first, then the lines it was inlined at
    what: str                     # the instruction(s), e.g. "shfl.sync.bfly.b32 + add.f32"
    kernel: str = ""              # the PTX function it was compiled into (demangled)
    helper: bool = False          # `function` is a __device__ helper inlined into `kernel`

    @property
    def line(self) -> int:
        return self.lines[0] if self.lines else 0


def instr_class(i: Instr) -> str | None:
    """The evidence-table class of one instruction, or None for ordinary arithmetic and control."""
    op, parts = i.op, i.parts
    if op == "shfl":
        return f"shfl.{next((p for p in parts if p in ('bfly', 'down', 'up', 'idx')), '?')}"
    if op == "redux":
        return "redux"
    if op in ("ld", "st", "atom", "red"):
        space = i.space
        if space in ("shared", "local"):
            return f"{space}.{op}"
        if space in ("global", "generic"):
            ops = [p for p in parts if p in _CACHE_OPS or p == "nc" or p.startswith(("L1::", "L2::"))]
            width = f".{i.access_bytes}B" if i.access_bytes else ""
            return f"global.{op}{width}" + "".join(f".{p}" for p in ops)
        return None
    if op in ("bar", "barrier"):
        return "barrier.cluster" if "cluster" in parts else "barrier"
    if op == "cp":
        if i.has("async", "bulk", "tensor"):
            return "cp.async.bulk.tensor"
        if i.has("async", "bulk"):
            return "cp.async.bulk"
        if i.has("async"):
            return "cp.async" if not i.has("commit_group") and not i.has("wait_group") and not i.has("wait_all") \
                else "cp.async.group"
    if op == "mbarrier":
        return "mbarrier"
    if op in ("ldmatrix", "stmatrix"):
        return op
    if op in ("mma", "wmma"):
        return f"{op}.{parts[1]}" if len(parts) > 1 else op
    if op == "wgmma":
        return f"wgmma.{parts[1]}" if len(parts) > 1 else op
    if "approx" in parts or op in ("tanh",):
        return f"approx.{op}" + (".ftz" if "ftz" in parts else "")
    if op == "setmaxnreg":
        return "setmaxnreg"
    if op == "mapa" or any("::cluster" in p and op != "cp" and op != "fence" for p in parts) \
            or any("%cluster" in o or "%nclusterid" in o or "%clusterid" in o for o in i.operands):
        return "cluster"
    return None


class CompiledKernel:
    """A kernel source with its PTX read back. `ok` is False (and `reason` says why) when the source
    does not compile; every question then has an empty answer."""

    def __init__(self, k: Kernel, result: PtxResult):
        self.k = k
        self.result = result
        self.ok = result.ok
        self.reason = "" if result.ok else (result.error_message or result.error_kind or "the PTX compile failed")
        self.module = ptx.read_ptx(result.ptx) if result.ok else ptx.Module()
        self.file = self.module.file_index("kernel.cu") if result.ok else None

    # ---- locations ---------------------------------------------------------------------------
    def lines(self, i: Instr) -> tuple[int, ...]:
        return i.lines(self.file) if self.file is not None else ()

    def line(self, i: Instr) -> int | None:
        ls = self.lines(i)
        return ls[0] if ls else None

    @cached_property
    def _fns(self):
        from klineage.mechanisms.codescan import scan
        return scan(self.k).fns

    def function_at(self, line: int) -> str:
        around = [f for f in self._fns if f.first <= line <= f.last]
        return min(around, key=lambda f: f.last - f.first).name if around else "<file>"

    @cached_property
    def helpers(self) -> set[str]:
        """Names of the file's __device__ functions (not __global__)."""
        return {f.name for f in self.k.sem.functions if f.space == "device"}

    def text(self, line: int) -> str:
        """The code of `line` with the macros it invokes expanded (comments blanked)."""
        from klineage.mechanisms.codescan import scan
        return scan(self.k).expanded(line)

    def site(self, mechanism: str, fn: ptx.Function, instrs, what: str | None = None) -> Site | None:
        instrs = list(instrs)
        ls = next((self.lines(i) for i in instrs if self.lines(i)), ())
        ls = ls + tuple(self.line(i) for i in instrs if self.line(i))
        if not ls:
            ls = (fn.first_loc[1],) if fn.first_loc and fn.first_loc[0] == self.file else ()
        if not ls:
            return None
        name = self.function_at(ls[0])
        what = what or " + ".join(dict.fromkeys(i.opcode for i in instrs))
        return Site(mechanism, name, tuple(dict.fromkeys(ls)), what, fn.base_name,
                    name in self.helpers and name != fn.base_name)

    def intrinsics(self, i: Instr) -> set[str]:
        """Unqualified names of the functions inlined along the instruction's chain (`__ldg`, ...)."""
        out = set()
        for f in i.functions:
            mangled = self.module.info_strings.get(f, "")
            if mangled:
                out.add(ptx.demangle(mangled))
        return out

    # ---- data flow ---------------------------------------------------------------------------
    def values_from(self, fn: ptx.Function, reg: str, through=MOVES, depth: int = 6) -> list[Instr]:
        """The instructions that produced `reg`, looking back through value moves (`through`)."""
        def step(r):
            for d in fn.defs.get(r, []):
                yield d, (list(d.srcs) if d.op in through else None)
        return _follow(reg, step, depth)

    def values_to(self, fn: ptx.Function, reg: str, through=MOVES, depth: int = 6) -> list[Instr]:
        """The instructions that consume `reg`, looking forward through value moves (`through`) and
        through local memory (a register array indexed at run time lives there: a value stored to it is
        taken to reach every local load of the function)."""
        local_dests = []

        def step(r):
            for u in fn.uses.get(r, []):
                if u.op in through:
                    yield u, list(u.dests)
                elif u.op == "st" and u.space == "local" and r not in ptx._regs(u.operands[0]):
                    if not local_dests:
                        local_dests.extend(d for i in fn.instrs if i.op == "ld" and i.space == "local"
                                           for d in i.dests)
                    yield u, list(local_dests)
                else:
                    yield u, None
        return _follow(reg, step, depth)

    def shared_symbols(self, fn: ptx.Function, address: str) -> set[str]:
        """Shared arrays an address operand (`[%r12]`, `[%r13+16]`, `[smem+8]`) points into, by following
        its register back through address arithmetic to `mov %r, SYMBOL`."""
        sym = ptx.symbol_of(address)
        if sym is not None:
            return {sym}
        shared = set(fn.shared) | set(self.module.shared)
        out, seen = set(), set()
        frontier = ptx._regs(address)
        for _ in range(12):
            nxt = []
            for r in frontier:
                for d in fn.defs.get(r, []):
                    if d.index in seen:
                        continue
                    seen.add(d.index)
                    for o in d.operands[1:]:
                        name = o.strip()
                        if name in shared:
                            out.add(name)
                    nxt += list(d.srcs)
            frontier = nxt
            if not frontier:
                break
        return out

    # ---- the table ---------------------------------------------------------------------------
    def table(self) -> list[dict]:
        """Per PTX function: its instruction classes (count and source lines), directives and resources."""
        res = {r.name: r for r in self.result.resources}
        out = []
        for fn in self.module.functions:
            counts: Counter = Counter()
            lines: dict[str, set[int]] = {}
            for i in fn.instrs:
                c = instr_class(i)
                if c is None:
                    continue
                counts[c] += 1
                ln = self.line(i)
                if ln:
                    lines.setdefault(c, set()).add(ln)
            r = res.get(fn.name)
            out.append({
                "function": fn.base_name, "ptx_name": fn.name, "kind": fn.kind,
                "directives": dict(fn.directives),
                "classes": {c: {"count": n, "lines": sorted(lines.get(c, ()))} for c, n in sorted(counts.items())},
                "shared_arrays": dict(fn.shared), "local_arrays": dict(fn.local),
                "resources": ({"registers": r.registers, "shared_bytes": r.shared_bytes, "stack_bytes": r.stack_bytes,
                               "spill_store_bytes": r.spill_store_bytes, "spill_load_bytes": r.spill_load_bytes,
                               "barriers": r.barriers} if r else {}),
            })
        return out


def _follow(reg: str, step, depth: int) -> list[Instr]:
    """The instructions a breadth-first walk from `reg` stops at: `step(r)` yields (instruction, the
    registers to go on with, or None to stop there), `depth` levels at most, each instruction once."""
    out, seen, frontier = [], set(), [reg]
    for _ in range(depth):
        nxt = []
        for r in frontier:
            for i, more in step(r):
                if i.index in seen:
                    continue
                seen.add(i.index)
                if more is None:
                    out.append(i)
                else:
                    nxt += more
        frontier = nxt
        if not frontier:
            break
    return out


def compile_kernel(k: Kernel, arch: str = DEFAULT_ARCH) -> CompiledKernel:
    """`k` compiled to PTX (cached by content) and read back."""
    return CompiledKernel(k, compile_ptx(k.source, arch))


def calls_any(text: str, names) -> bool:
    return any(re.search(rf"(?<![\w.]){re.escape(n)}\s*\(", text) for n in names)
