"""libclang facts about a CUDA source: functions and their execution space, parameter types,
`__shared__` variables and their sizes, launch bounds, vector-type casts, intrinsic calls.

The PyPI libclang has no clang resource headers and cannot read NVIDIA's, so sources are parsed as
CUDA host-side code with `-nostdinc` against `cuda_prelude/`: stand-in headers for the includes
kernels use (empty, or small declarations) and `klineage_cuda_prelude.h`, force-included, which
declares the CUDA attributes, index variables, vector / half / bfloat16 types and intrinsics.
"""
from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import clang.cindex as ci

PRELUDE_DIR = Path(__file__).with_name("cuda_prelude")
PRELUDE = PRELUDE_DIR / "klineage_cuda_prelude.h"
_FILE = "kernel.cu"
ARGS = ("-x", "cuda", "--cuda-host-only", "-nocudainc", "-nocudalib", "-nostdinc", "-nostdinc++",
        "-std=c++17", "--cuda-gpu-arch=sm_90", "-Wno-unknown-cuda-version", "-ferror-limit=0",
        "-I", str(PRELUDE_DIR), "-include", str(PRELUDE))

# Vector types a 16/8/4-byte access can use: name -> (element type, lanes, bytes).
VECTOR_TYPES = {
    "float4": ("float", 4, 16), "float2": ("float", 2, 8), "int4": ("int", 4, 16), "int2": ("int", 2, 8),
    "uint4": ("unsigned int", 4, 16), "uint2": ("unsigned int", 2, 8), "double2": ("double", 2, 16),
    "longlong2": ("long long", 2, 16), "__half2": ("__half", 2, 4), "__nv_bfloat162": ("__nv_bfloat16", 2, 4),
    "char4": ("signed char", 4, 4), "uchar4": ("unsigned char", 4, 4), "short2": ("short", 2, 4),
    "short4": ("short", 4, 8),
}


@dataclass(frozen=True)
class Param:
    name: str
    type: str          # as written, e.g. "const float4 *__restrict"
    pointee: str | None  # canonical pointee type for pointers, e.g. "const float4"
    restrict: bool


@dataclass(frozen=True)
class Function:
    name: str
    space: str  # "global" | "device" | "host"
    lines: tuple[int, int]
    params: tuple[Param, ...]
    launch_bounds: str | None  # the argument text of __launch_bounds__, if any
    is_template: bool


@dataclass(frozen=True)
class SharedVar:
    name: str
    type: str
    size_bytes: int | None  # None when the size depends on a template parameter or is dynamic
    line: int
    function: str | None
    dynamic: bool


@dataclass(frozen=True)
class VectorCast:
    line: int
    to_type: str   # e.g. "const float4 *"
    vector: str    # canonical vector type name, e.g. "float4"
    bytes: int


@dataclass
class Semantics:
    functions: list[Function] = field(default_factory=list)
    shared: list[SharedVar] = field(default_factory=list)
    vector_casts: list[VectorCast] = field(default_factory=list)
    calls: list[tuple[str, int]] = field(default_factory=list)
    live_lines: frozenset[int] = frozenset()
    errors: list[str] = field(default_factory=list)
    var_types: dict[tuple[str, int], str] = field(default_factory=dict)

    def function(self, name: str) -> Function | None:
        return next((f for f in self.functions if f.name == name), None)

    def kernels(self) -> list[Function]:
        return [f for f in self.functions if f.space == "global"]

    def called(self, name: str) -> list[int]:
        return [line for n, line in self.calls if n == name]

    def is_live(self, line: int) -> bool:
        """False for lines removed by the preprocessor (no AST node starts there)."""
        return line in self.live_lines

    def shared_bytes(self, function: str | None = None) -> int | None:
        """Static shared memory declared (in `function`, or anywhere); None if a size is unknown."""
        vs = [v for v in self.shared if not v.dynamic and (function is None or v.function == function)]
        if any(v.size_bytes is None for v in vs):
            return None
        return sum(v.size_bytes for v in vs)


def vector_name(type_spelling: str) -> str | None:
    """The vector type named in a (pointer) type spelling, e.g. 'const float4 *' -> 'float4'."""
    words = type_spelling.replace("*", " ").replace("&", " ").split()
    for w in words:
        w = {"half2": "__half2", "nv_bfloat162": "__nv_bfloat162"}.get(w, w)
        if w in VECTOR_TYPES:
            return w
    return None


def _in_file(c: ci.Cursor) -> bool:
    f = c.location.file
    return f is not None and f.name == _FILE


def _space(c: ci.Cursor) -> str:
    kinds = {ch.kind for ch in c.get_children()}
    if ci.CursorKind.CUDAGLOBAL_ATTR in kinds:
        return "global"
    if ci.CursorKind.CUDADEVICE_ATTR in kinds:
        return "device"
    return "host"


def _launch_bounds(c: ci.Cursor) -> str | None:
    toks = [t.spelling for t in c.get_tokens()]
    if "__launch_bounds__" not in toks:
        return None
    i = toks.index("__launch_bounds__") + 1
    depth, out = 0, []
    for t in toks[i:]:
        if t == "(":
            depth += 1
            if depth == 1:
                continue
        elif t == ")":
            depth -= 1
            if depth == 0:
                break
        out.append(t)
    return " ".join(out)


def _enclosing_function(c: ci.Cursor) -> str | None:
    p = c.semantic_parent
    while p is not None and p.kind not in (ci.CursorKind.TRANSLATION_UNIT,):
        if p.kind in (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE, ci.CursorKind.CXX_METHOD):
            return p.spelling
        p = p.semantic_parent
    return None


def _file_cursors(tu: ci.TranslationUnit) -> Iterator[ci.Cursor]:
    """Every cursor written in the kernel file, in preorder. Top-level declarations of the headers
    (the CUDA runtime's, most of the tree) are skipped whole: a declaration's extent lies in one
    file, so none of them holds a cursor of ours."""
    for top in tu.cursor.get_children():
        if _in_file(top):
            yield from (c for c in top.walk_preorder() if _in_file(c))


@functools.lru_cache(maxsize=1024)
def _analyze(digest: str, source: str) -> Semantics:
    index = ci.Index.create()
    tu = index.parse(_FILE, args=list(ARGS), unsaved_files=[(_FILE, source)],
                     options=ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)
    sem = Semantics()
    sem.errors = [f"{d.location.line}:{d.location.column}: {d.spelling}" for d in tu.diagnostics
                  if d.severity >= ci.Diagnostic.Error and d.location.file and d.location.file.name == _FILE]
    live = set()
    for c in _file_cursors(tu):
        k = c.kind
        if k.is_statement() or k.is_expression() or k.is_declaration():
            live.add(c.location.line)
        if k in (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE) and c.is_definition():
            params = []
            for p in c.get_children():
                if p.kind != ci.CursorKind.PARM_DECL:
                    continue
                t = p.type
                pointee = t.get_pointee().spelling if t.kind == ci.TypeKind.POINTER else None
                params.append(Param(p.spelling, t.spelling, pointee, "__restrict" in t.spelling))
            sem.functions.append(Function(c.spelling, _space(c), (c.extent.start.line, c.extent.end.line),
                                          tuple(params), _launch_bounds(c), k == ci.CursorKind.FUNCTION_TEMPLATE))
        elif k == ci.CursorKind.VAR_DECL:
            sem.var_types[(c.spelling, c.location.line)] = c.type.spelling
            if any(ch.kind == ci.CursorKind.CUDASHARED_ATTR for ch in c.get_children()):
                size = c.type.get_size()
                dynamic = c.type.kind == ci.TypeKind.INCOMPLETEARRAY
                sem.shared.append(SharedVar(c.spelling, c.type.spelling, size if size > 0 else None,
                                            c.location.line, _enclosing_function(c), dynamic))
        elif k in (ci.CursorKind.CXX_REINTERPRET_CAST_EXPR, ci.CursorKind.CSTYLE_CAST_EXPR,
                   ci.CursorKind.CXX_STATIC_CAST_EXPR):
            t = c.type
            if t.kind == ci.TypeKind.POINTER:
                vec = vector_name(t.get_pointee().get_canonical().spelling)
                if vec:
                    sem.vector_casts.append(VectorCast(c.location.line, t.spelling, vec, VECTOR_TYPES[vec][2]))
        elif k == ci.CursorKind.CALL_EXPR and c.spelling:
            sem.calls.append((c.spelling, c.location.line))
    sem.live_lines = frozenset(live)
    return sem


def analyze(source: str) -> Semantics:
    """Facts about `source` (cached by content). Never raises for bad CUDA: errors are listed."""
    return _analyze(hashlib.sha256(source.encode()).hexdigest(), source)


@functools.lru_cache(maxsize=64)
def _macro_lines(digest: str, source: str) -> frozenset[int]:
    index = ci.Index.create()
    tu = index.parse(_FILE, args=list(ARGS), unsaved_files=[(_FILE, source)],
                     options=ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)
    return frozenset(c.location.line for c in tu.cursor.get_children()
                     if c.kind == ci.CursorKind.MACRO_DEFINITION and c.location.file is not None
                     and c.location.file.name == _FILE)


def macro_lines(source: str) -> frozenset[int]:
    """Lines of the `#define`s the preprocessor keeps (libclang's record; dead #if branches have
    none), cached by content."""
    return _macro_lines(hashlib.sha256(source.encode()).hexdigest(), source)


def libclang_version() -> str:
    """The libclang wheel's version, after checking that its shared library loads (an index is made)."""
    from importlib import metadata
    ci.Index.create()
    try:
        return f"{metadata.version('libclang')} (loaded)"
    except metadata.PackageNotFoundError:
        return "loaded (version unknown: not installed as the libclang wheel)"
