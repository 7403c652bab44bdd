"""A reader for the PTX nvcc writes with line info (`nvcc -ptx -lineinfo`).

`read_ptx(text)` gives the module's functions (`.entry` kernels and `.func` device functions that
were not inlined), each with its performance directives (`.maxntid`, `.minnctapersm`, `.maxnreg`,
`.reqntid`, cluster shape), the shared and local arrays it declares, and its instructions in order.
Every instruction carries

- its opcode split into parts (`ld.global.nc.v4.f32` -> ld, global, nc, v4, f32), its guard
  predicate, and its operands split into destinations and sources;
- its source location from the `.loc` directive before it, as a chain from the innermost location
  outwards through `inlined_at` (a shuffle inside an inlined `warp_sum` helper reads
  [(file 1, line 7), (file 1, line 25)]: the helper's line, then the call site in the kernel);
- whether it was written by hand in an `asm(...)` statement (nvcc brackets those with
  `// begin inline asm` and `// end inline asm`).

Registers are virtual and mostly assigned once, so `defs` (register -> the instructions writing it)
is enough for the short data-flow questions evidence asks (did this shared store take a value
loaded from global memory?). Nothing here knows about mechanisms: klineage.mechanisms reads the
instructions and decides what they are evidence of.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

from klineage.parse.text import split_top_level

Loc = tuple[int, int]  # (file index, line)

_LOC = re.compile(r"\.loc\s+(\d+)\s+(\d+)\s+(\d+)(?:\s*,\s*function_name\s+(\$?[\w.]+))?"
                  r"(?:\s*,\s*inlined_at\s+(\d+)\s+(\d+)\s+(\d+))?")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"')
_FUNC = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+|\.extern\s+)*\.(entry|func)\s+(?:\([^)]*\)\s*)?([\w$.]+)")
_DIRECTIVE = re.compile(r"^\s*\.(maxntid|reqntid|minnctapersm|maxnreg|reqnctapercluster|explicitcluster|"
                        r"maxclusterrank|pragma)\b\s*([^\n{]*)")
_ARRAY = re.compile(r"\.(shared|local)\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+([\w$]+)\s*\[(\d*)\]")
_INFO = re.compile(r"^(\$L__info_string\d+):\s*$")
_BYTES = re.compile(r"^\s*\.b8\s+([\d,\s]+)$")
_REG = re.compile(r"%[\w.]+")
_TYPE_BYTES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2, "b32": 4, "u32": 4,
               "s32": 4, "f32": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8, "b128": 16, "f16x2": 4, "bf16x2": 4}
# opcodes whose first operand is not a register written by the instruction
_NO_DEST = ("st", "red", "bar", "barrier", "membar", "fence", "bra", "ret", "exit", "prefetch", "prefetchu", "trap",
            "cp", "stmatrix", "wgmma.fence", "wgmma.commit_group", "wgmma.wait_group", "setmaxnreg", "griddepcontrol",
            "call", "brkpt", "pmevent", "nanosleep")


@dataclass(frozen=True)
class Instr:
    index: int
    opcode: str                    # full opcode, e.g. "ld.global.nc.v4.f32"
    operands: tuple[str, ...]      # operand texts, vector braces and address brackets kept
    dests: tuple[str, ...]         # registers written
    srcs: tuple[str, ...]          # registers read (address registers included)
    guard: str = ""                # "@%p1" / "@!%p1"
    chain: tuple[Loc, ...] = ()    # source locations, innermost first, then each inlined_at outwards
    functions: tuple[str, ...] = ()  # mangled names of the inlined functions along the chain ("" for the top)
    asm: bool = False              # written by hand in an asm statement

    @cached_property
    def parts(self) -> tuple[str, ...]:
        return tuple(self.opcode.split("."))

    @property
    def op(self) -> str:
        return self.parts[0]

    def has(self, *mods: str) -> bool:
        return all(m in self.parts for m in mods)

    @property
    def space(self) -> str:
        """The state space of a memory instruction: global, shared, local, param, const, generic."""
        for p in self.parts[1:]:
            base = p.split("::")[0]
            if base in ("global", "shared", "local", "param", "const"):
                return base
        return "generic"

    @property
    def vector(self) -> int:
        """Lanes of a .v2/.v4/.v8 access, 1 otherwise."""
        for p in self.parts:
            if re.fullmatch(r"v\d", p):
                return int(p[1])
        return 1

    @property
    def access_bytes(self) -> int:
        """Bytes one thread moves with this load or store (lanes x element size), 0 when unknown."""
        size = next((_TYPE_BYTES[p] for p in reversed(self.parts) if p in _TYPE_BYTES), 0)
        return size * self.vector

    def lines(self, file: int) -> tuple[int, ...]:
        """Source lines of file `file` along the location chain, innermost first."""
        return tuple(ln for f, ln in self.chain if f == file and ln > 0)


@dataclass
class Function:
    name: str                      # mangled
    kind: str                      # "entry" | "func"
    directives: dict[str, str] = field(default_factory=dict)
    shared: dict[str, int] = field(default_factory=dict)   # array -> bytes (0: dynamic / unsized)
    local: dict[str, int] = field(default_factory=dict)
    instrs: list[Instr] = field(default_factory=list)
    first_loc: Loc | None = None   # the .loc of the function's opening

    @cached_property
    def defs(self) -> dict[str, list[Instr]]:
        out: dict[str, list[Instr]] = {}
        for i in self.instrs:
            for d in i.dests:
                out.setdefault(d, []).append(i)
        return out

    @cached_property
    def uses(self) -> dict[str, list[Instr]]:
        out: dict[str, list[Instr]] = {}
        for i in self.instrs:
            for s in i.srcs:
                out.setdefault(s, []).append(i)
        return out

    @property
    def base_name(self) -> str:
        return demangle(self.name)


@dataclass
class Module:
    target: str = ""
    version: str = ""
    files: dict[int, str] = field(default_factory=dict)
    functions: list[Function] = field(default_factory=list)
    shared: dict[str, int] = field(default_factory=dict)   # module-scope shared arrays (dynamic `extern`)
    info_strings: dict[str, str] = field(default_factory=dict)

    def function(self, name: str) -> Function | None:
        return next((f for f in self.functions if f.name == name or f.base_name == name), None)

    def file_index(self, path_suffix: str) -> int | None:
        """Index of the `.file` whose path ends with `path_suffix`."""
        return next((i for i, p in sorted(self.files.items()) if p.endswith(path_suffix)), None)


def demangle(name: str) -> str:
    """The unqualified name of an Itanium-mangled function (`_Z8warp_sumf` -> warp_sum,
    `_ZN3cfg4gemmILi4EEEvPf` -> gemm); an extern "C" name unchanged."""
    if not name.startswith("_Z"):
        return name
    s = name[2:]
    if s.startswith("L"):
        s = s[1:]
    last = ""
    if s.startswith("N"):
        s = s[1:]
        while s and s[0] in "rVKRO":
            s = s[1:]
        while s and s[0] != "E":
            m = re.match(r"(\d+)", s)
            if m:
                n = int(m.group(1))
                last = s[len(m.group(1)):len(m.group(1)) + n]
                s = s[len(m.group(1)) + n:]
            elif s[0] == "I":
                s = _skip_template_args(s)
            else:
                break
        return last or name
    m = re.match(r"(\d+)", s)
    if m:
        n = int(m.group(1))
        return s[len(m.group(1)):len(m.group(1)) + n]
    return name


def _skip_template_args(s: str) -> str:
    depth = 0
    for i, ch in enumerate(s):
        if ch == "I":
            depth += 1
        elif ch == "E":
            depth -= 1
            if depth == 0:
                return s[i + 1:]
    return ""


def _regs(text: str) -> list[str]:
    return [r.split("|")[0] for r in _REG.findall(text)]


def _dest_count(opcode: str, operands: list[str]) -> int:
    """How many leading operands the instruction writes (0 or 1)."""
    if not operands or operands[0].lstrip().startswith("[") or operands[0].strip() == "_":
        return 0
    if any(opcode == p or opcode.startswith(p + ".") for p in _NO_DEST):
        return 0
    return 1


def _statements(body: str) -> list[str]:
    return [s.strip() for s in body.split(";") if s.strip()]


def read_ptx(text: str) -> Module:
    """Parse PTX text; unknown directives are skipped, never an error."""
    mod = Module()
    fn: Function | None = None
    depth = 0
    loc_chain: tuple[Loc, ...] = ()
    loc_funcs: tuple[str, ...] = ()
    known: dict[tuple[int, int, int], tuple[tuple[Loc, ...], tuple[str, ...]]] = {}
    in_asm = False
    info_name = None
    pending_header = ""
    index = 0
    for raw in text.splitlines():
        stripped = raw.strip()
        if "// begin inline asm" in raw:
            in_asm = True
            continue
        if "// end inline asm" in raw:
            in_asm = False
            continue
        if info_name is not None:
            m = _BYTES.match(raw)
            if m:
                mod.info_strings[info_name] += "".join(chr(int(b)) for b in m.group(1).split(",") if b.strip()
                                                       and int(b) > 0)
                continue
            info_name = None
        m = _INFO.match(stripped)
        if m:
            info_name = m.group(1)
            mod.info_strings[info_name] = ""
            continue
        code = raw.split("//", 1)[0]
        if not code.strip():
            continue
        m = _FILE.match(code)
        if m:
            mod.files[int(m.group(1))] = m.group(2)
            continue
        if code.lstrip().startswith(".target"):
            mod.target = code.split()[1].rstrip(",")
            continue
        if code.lstrip().startswith(".version"):
            mod.version = code.split()[1]
            continue
        m = _FUNC.match(code)
        if m and depth == 0:
            fn = Function(m.group(2), m.group(1))
            mod.functions.append(fn)
            pending_header = code
            if ";" in code and "{" not in code:  # a declaration (prototype), not a definition
                mod.functions.pop()
                fn = None
            continue
        if fn is not None and depth == 0:
            d = _DIRECTIVE.match(code)
            if d:
                fn.directives[d.group(1)] = d.group(2).strip().rstrip(";").strip()
                continue
            if "{" not in code:
                pending_header += code
                if pending_header.rstrip().endswith(";"):
                    # `.func (...) name (...) ;` a prototype spread over lines, not a definition
                    if fn.instrs == [] and not fn.directives:
                        mod.functions.remove(fn)
                        fn = None
                    pending_header = ""
                continue  # the parameter list
            pending_header = ""
        if depth == 0 and fn is None:
            a = _ARRAY.search(code)
            if a and a.group(1) == "shared":
                mod.shared[a.group(4)] = _array_bytes(a)
            continue
        m = _LOC.search(code)
        if m and fn is not None:
            here = (int(m.group(1)), int(m.group(2)))
            key = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            fname = m.group(4) or ""
            if m.group(5):
                parent = (int(m.group(5)), int(m.group(6)), int(m.group(7)))
                pchain, pfuncs = known.get(parent, (((parent[0], parent[1]),), ("",)))
                loc_chain, loc_funcs = (here,) + pchain, (fname,) + pfuncs
            else:
                loc_chain, loc_funcs = (here,), ("",)
            known[key] = (loc_chain, loc_funcs)
            if fn.first_loc is None:
                fn.first_loc = here
            continue
        for ch in code:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth = max(0, depth - 1)
        if fn is None:
            continue
        if depth == 0 and "}" in code:
            fn = None
            continue
        body = code.replace("{", " ").replace("}", " ") if not re.search(r"\{\s*%", code) else code
        for stmt in _statements(body):
            stmt = re.sub(r"^[\w$]+:\s*", "", stmt)  # a label on the same line
            if not stmt or stmt.startswith("."):
                a = _ARRAY.search(stmt)
                if a:
                    (fn.shared if a.group(1) == "shared" else fn.local)[a.group(4)] = _array_bytes(a)
                continue
            guard = ""
            g = re.match(r"(@!?%[\w]+)\s+", stmt)
            if g:
                guard, stmt = g.group(1), stmt[g.end():]
            parts = stmt.split(None, 1)
            opcode = parts[0]
            operands = split_top_level(parts[1], "{[", "}]") if len(parts) > 1 else []
            n_dest = _dest_count(opcode, operands)
            dests = [r for o in operands[:n_dest] for r in _regs(o)]
            if opcode.startswith("shfl") and operands:  # `%r6|%p1`: the predicate is written too
                dests += [r for r in re.findall(r"\|(%[\w]+)", operands[0])]
            srcs = [r for o in operands[n_dest:] for r in _regs(o)]
            if opcode.startswith(("mma.", "wgmma.mma_async")) and operands:
                srcs += _regs(operands[0])  # accumulators are read as well
            fn.instrs.append(Instr(index, opcode, tuple(operands), tuple(dests), tuple(srcs), guard, loc_chain,
                                   loc_funcs, in_asm))
            index += 1
    return mod


def _array_bytes(m: re.Match) -> int:
    count = int(m.group(5)) if m.group(5) else 0
    return count * _TYPE_BYTES.get(m.group(3), 1)


def variable_name(symbol: str) -> str:
    """The source name of a PTX symbol: a function-local static (`_ZZ7k_stagePKfPfE1s` -> s), an
    Itanium-mangled name, or the symbol itself."""
    m = re.match(r"_ZZ.*E(\d+)([A-Za-z_]\w*)$", symbol)
    if m and len(m.group(2)) == int(m.group(1)):
        return m.group(2)
    return demangle(symbol)


def symbol_of(operand: str) -> str | None:
    """The symbol an address operand names directly (`[smem+16]` -> smem), else None."""
    m = re.fullmatch(r"\[\s*([A-Za-z_$][\w$]*)\s*(?:[+-]\s*\d+)?\s*\]", operand.strip())
    return m.group(1) if m else None
