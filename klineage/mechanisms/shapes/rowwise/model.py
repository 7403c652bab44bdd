"""The description of a row kernel in its scalar form (Row, its passes, accumulators, accesses and
launch), the family's mechanism names and defaults, and the byte-level helpers every stage shares."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from klineage.parse.syntax import walk

WARP = "warp_per_row"
BLOCK = "block_per_row"
SHUFFLE = "warp_reduction"
ONLINE = "online_softmax"
VECTOR = "vector_access"
CACHE = "register_cache"
MECHANISMS = (WARP, BLOCK, SHUFFLE, ONLINE, VECTOR, CACHE)

DEFAULT_THREADS = {WARP: 256, BLOCK: 256}
DEFAULT_ITEMS = 4
VECTOR_BYTES = 16
ELEM_BYTES = {"float": 4, "int": 4, "unsigned int": 4, "unsigned": 4, "double": 8, "__nv_bfloat16": 2,
              "nv_bfloat16": 2, "__half": 2, "half": 2}
_FLOATING = {"float", "double"}
_WARP_ROW = "(blockIdx.x * blockDim.x + threadIdx.x) / 32"
_BLOCK_ROW = "blockIdx.x"
_TEAM = {"warp": "const int kl_t = threadIdx.x % 32, kl_n = 32;  // the lane, and the lanes sharing a row",
         "block": "const int kl_t = threadIdx.x, kl_n = blockDim.x;  // the thread, and the threads sharing a row"}
# A strided row (a line across a non-innermost dimension) shared by a block: 32 neighbouring lines a block,
# one per lane, so every warp's load is 32 neighbouring elements; the warps split each line. A thread past
# the last line keeps the block's barriers: it computes the last line (its loads stay in bounds), walks
# no element (kl_t past any extent) and stores nothing.
_LINE_DECL = "const long long kl_line = (long long)blockIdx.x * 32 + threadIdx.x % 32;"
_LINE_NOTE = "  // this thread's line: 32 neighbouring lines a block, one per lane"
_FAR = "(1 << 30)"


def _bound(rows: str) -> str:
    """The rows bound as an operand (parenthesised unless a name or a number)."""
    return rows if re.fullmatch(r"\w+", rows) else f"({rows})"


def _line_row(rows: str) -> str:
    b = _bound(rows)
    return f"kl_line < {b} ? kl_line : {b} - 1"


def _team(gran: str, rows: str = "") -> str:
    """The team declaration a shared row's kernel has after its bounds check (comment included)."""
    if gran == "line":
        return (f"const int kl_t = kl_line < {_bound(rows)} ? (int)(threadIdx.x / 32) : {_FAR}, kl_n = blockDim.x / 32;"
                "  // the warp, and the warps sharing the line (none past the last line)")
    return _TEAM[gran]
_MAX_FNS = {"fmaxf": "max", "fmax": "max", "max": "max", "fminf": "min", "fmin": "min", "min": "min"}
_EXP_FNS = ("expf", "__expf", "exp")
_BANNED = re.compile(r"\b(?:__syncthreads\w*|__syncwarp|__shfl\w*|__ballot\w*|__any_sync|__all_sync|atomic\w+|"
                     r"cooperative_groups|this_thread_block|__threadfence\w*)\b")
_HELPER = re.compile(r"\bkl_row_(sum|max|min)\b")
_KL_WORDS = re.compile(r"\bkl_(?:t|n|nv|u|l|i|mx|ld\d+|st\d+|rc\d+|tree|part|line)\b")  # (kl_x, kl_m: an online pass's own)


def _strip(n):
    while n is not None and n.type == "parenthesized_expression" and n.named_child_count == 1:
        n = n.named_children[0]
    return n


def _ids(node) -> set[str]:
    return {n.text.decode() for n in walk(node) if n.type == "identifier"}


def _line_start(data: bytes, pos: int) -> int:
    return data.rfind(b"\n", 0, pos) + 1


def _indent_at(data: bytes, pos: int) -> str:
    start = _line_start(data, pos)
    lead = data[start:pos].decode()
    return lead if not lead.strip() else re.match(r"[ \t]*", lead).group(0)


def _elem(type_text: str) -> str:
    return " ".join(w for w in type_text.replace("*", " ").split()
                    if w not in ("const", "volatile", "__restrict__", "__restrict", "restrict"))


# ---------------------------------------------------------------- the description of a row kernel

@dataclass
class Acc:
    name: str
    op: str          # sum | max | min
    ctype: str       # float | double
    fn: str = ""     # the max / min function the kernel writes (fmaxf ...)


@dataclass
class Online:
    m: str
    s: str
    ctype: str
    fmax: str
    exp: str
    x: str
    y: str           # the exponent's operand ("" when it is x)


@dataclass
class Access:
    ptr: str
    base: str        # the index's row offset ("" for p[c])
    kind: str        # load | store | update (a compound assignment: read, then written)
    start: int       # the subscript expression's bytes in the source
    end: int
    stride: str = "" # the column's step in elements ("" for 1: the row is contiguous)


@dataclass
class Pass:
    start: int               # the for statement's bytes (absolute)
    end: int
    header_end: int          # just after the header's `)`
    var: str
    vtype: str
    cond: str                # the condition's text
    init: tuple[int, int]    # the initial value's bytes
    update: tuple[int, int]  # the update's bytes
    body: tuple[int, int]    # the body statement's bytes
    accs: list[Acc]
    online: Online | None
    accesses: list[Access]
    indent: str
    combine_end: int = -1    # end of the combine statements after the pass (G form), else `end`
    first: int = 0           # the first column (a max from x[0] walks from 1)

    @property
    def reads(self) -> set[str]:
        return {a.ptr for a in self.accesses if a.kind in ("load", "update")}

    @property
    def writes(self) -> set[str]:
        return {a.ptr for a in self.accesses if a.kind in ("store", "update")}

    @property
    def updates(self) -> bool:
        return any(a.kind == "update" for a in self.accesses)


@dataclass
class Launch:
    call: tuple[int, int]
    grid: tuple[int, int]          # the bytes of the grid expression to rewrite
    block_text: str                # the launch's block argument as written
    block_edit: tuple[int, int] | None   # the bytes of the block expression to rewrite (None: a macro already)
    macro: str | None              # the tunable holding the block size, if any
    rows_arg: str


@dataclass
class Row:
    """A row kernel in its scalar form (decorations read back)."""
    source: str
    kernel: str
    gran: str                      # thread | warp | block | line (a strided row shared by a block's warps)
    row: str
    rows: str                      # the bound of the row index: an expression of integer parameters
    cols: str
    row_init: tuple[int, int]
    guard_end: int                 # the bounds check's end (of its `{` where it encloses the body)
    team: tuple[int, int] | None   # the kl_t / kl_n declaration (whole lines)
    passes: list[Pass]
    stores: list[tuple[int, int]]  # top-level statements that store per row (unguarded)
    guarded: list[tuple[int, int]] # top-level `if (kl_t == 0) ...` wrappers
    decls: dict[str, tuple[int, str]]  # top-level declared name -> (start byte, type)
    ptrs: dict[str, str]           # pointer name -> element type
    combine: str | None            # tree | shuffle (None: no helper yet)
    helpers: list[tuple[int, int]] # the helper definitions' bytes (whole lines)
    fn_start: int                  # the kernel definition's first byte (its line)
    body_indent: str
    launch: Launch | None
    bounds: int | None             # a literal __launch_bounds__ on the kernel
    prefix: str                    # for new tuning constants (ENTRY point upper-cased)
    row_decl: tuple[int, int] = (0, 0)  # the row index's declaration statement
    layout: str = "contiguous"     # contiguous | strided (a pass steps the row by more than one element)
    stride: str = ""               # a strided row's step (the first strided access's)
    facts: dict = field(default_factory=dict)

    @property
    def ops(self) -> list[tuple[str, str, str]]:
        """The (op, ctype, fn) the kernel's combines need, in first-use order."""
        out = []
        for p in self.passes:
            items = [(a.op, a.ctype, a.fn) for a in p.accs]
            if p.online is not None:
                items = [("max", p.online.ctype, p.online.fmax), ("sum", p.online.ctype, "")]
            for it in items:
                if it not in out:
                    out.append(it)
        return out


class _NA(Exception):
    """A reason this module does not rewrite the kernel (NotApplicable's text)."""
