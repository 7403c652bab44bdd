"""The problem contract: a workload folder's ``workload.py``, loaded by path and validated.

A workload file is plain Python defining these module-level names (all required unless marked):

    NAME        str, unique workload name
    FAMILY      str, operator family ("reduction", "elementwise", "gemm", ...)
    DTYPES      tuple of dtype names the kernel sees ("float32", "bfloat16", ...)
    ENTRY       str, the extern "C" entry point each kernel exports
    ARGS        list of dicts, in C order. Pointer args: {"name", "kind": "ptr", "dtype",
                "role": "in" | "out" | "inout"}; scalar args: {"name", "kind": "int" | "int64" |
                "float"}. The entry point takes these, then a cudaStream_t, and returns cudaError_t.
    make_inputs(shape, seed, device="cpu") -> dict name -> tensor for every "in"/"inout" pointer
    outputs(shape) -> dict name -> (tuple dims, dtype name) for every "out"/"inout" pointer
    scalars(shape) -> dict name -> int/float for every scalar arg
    reference(inputs, shape) -> dict output name -> tensor, the oracle (computed in float64)
    vendor(inputs, shape) -> dict output name -> tensor, the performance reference, in the
                workload's own dtypes (torch eager, cuBLAS through torch, ...); distinct from the
                oracle
    VENDOR_NAME str, what ``vendor`` runs ("torch eager x.sum(dim=1)")
    BENCHMARK_CASES  list of shapes (dicts of ints)
    PROBE_SHAPES     list of shapes stressing the kernels' assumptions. A shape may carry the
                reserved key "offset" (elements): every pointer argument of that call is then
                passed `offset` elements past a 256-byte-aligned allocation, so a kernel that
                assumes 16-byte-aligned bases meets a misaligned one (the ABI only promises the
                element's own alignment). scalars() and the other functions ignore the key.
    TOLERANCE   {"rtol": float, "atol": float, "min_matched": float in (0, 1]}
    bytes_moved(shape) -> int, the fewest bytes any kernel must move through device memory
    flops(shape) -> int, the floating-point operations of the computation
    STATEFUL    (optional, default False) whether a kernel may keep state between calls
    TIMING_BUDGET_S  (optional, positive number) seconds one timing trial of a benchmark case may
                take, candidate and vendor calls together. Without it every candidate gets the
                gate's fixed warm-up and reps; with it a slow candidate (a naive attention kernel at
                a second per call) gets fewer, never under 5 timed calls per trial. The reps used
                are recorded with each timing.
    DOMAIN      (optional) the inputs the kernels are valid on, for code written for a restricted
                domain: {"multiple_of": {"C": 4, "N*C": 256}, "at_least": {"C": 32},
                "aligned_bytes": 16}. multiple_of and at_least map a shape key, or a product of
                keys joined by "*", to an int; aligned_bytes is the alignment every pointer base
                keeps (the "offset" shape key must keep it). Every benchmark case must lie inside
                it; probe shapes outside it are not run (the gate and the stress probes skip
                them), and the domain is a precondition of every skill mined on the workload.
    LAUNCH      (optional) launch configurations the entry point takes as int arguments:
                {"block": [256, 128, 512]} for an ARGS entry {"name": "block", "kind": "int"}.
                The first value is the one the gate passes; the others are the axis a sweep may
                try (Workload.with_launch gives the workload that passes them). scalars(shape)
                leaves such an argument out.
    check(inputs, outputs, shape) -> list of str (optional): problems found in a kernel's outputs,
                empty when they are valid, for outputs an elementwise comparison cannot judge
                (top-k indices where several columns hold equal values). The gate fails a seed
                whose outputs have problems, with them as the reason, on top of comparing every
                output ``reference`` returns; ``reference`` may then leave such outputs out. It gets
                the inputs and outputs as device tensors and must not raise on wrong outputs.

A workload may share code with its siblings through a package of the corpus folder (the folder above
the workload folders), imported by name: ``from heldout_ops.attention import define``. The loader puts
the corpus folder on the import path for such a file, and the workload's content hash then covers
every file of each package it imports (``shared_modules``), so a change there re-keys every
evaluation of the workloads built on it, as a change of workload.py itself does.

Malformed files raise ``WorkloadError`` naming the file and the field.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import inspect
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from klineage.errors import WorkloadError

DTYPE_C = {
    "float32": "float",
    "float16": "__half",
    "bfloat16": "__nv_bfloat16",
    "float64": "double",
    "int32": "int",
    "int64": "long long",
    "uint8": "unsigned char",
    "int8": "signed char",
}
SCALAR_C = {"int": "int", "int64": "long long", "float": "float"}
ROLES = ("in", "out", "inout")
OFFSET_KEY = "offset"  # reserved shape key: pointer arguments passed this many elements past alignment
ALIAS_KEY = "alias"    # reserved shape key (1): each output is passed as the buffer of a same-shaped input
MAX_OFFSET = 64
CALLABLES = ("make_inputs", "outputs", "scalars", "reference", "vendor", "bytes_moved", "flops")


@dataclass(frozen=True)
class Arg:
    name: str
    kind: str  # "ptr" or a key of SCALAR_C
    dtype: str | None = None
    role: str | None = None

    @property
    def c_decl(self) -> str:
        if self.kind == "ptr":
            const = "const " if self.role == "in" else ""
            return f"{const}{DTYPE_C[self.dtype]}* {self.name}"
        return f"{SCALAR_C[self.kind]} {self.name}"


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    min_matched: float


@dataclass(frozen=True)
class Workload:
    name: str
    family: str
    dtypes: tuple[str, ...]
    entry: str
    args: tuple[Arg, ...]
    tolerance: Tolerance
    benchmark_cases: tuple[dict, ...]
    probe_shapes: tuple[dict, ...]
    vendor_name: str
    stateful: bool
    path: Path
    content_hash: str
    module: Any = field(repr=False, compare=False)
    timing_budget_s: float | None = None
    domain: dict = field(default_factory=dict)  # DOMAIN, checked ({} when undeclared)
    launch: dict = field(default_factory=dict)  # LAUNCH, checked: name -> [default, other values...]

    # Thin wrappers so callers never reach into the module directly.
    def make_inputs(self, shape: dict, seed: int, device: str = "cpu") -> dict:
        return self.module.make_inputs(shape, seed, device=device)

    def outputs(self, shape: dict) -> dict:
        return self.module.outputs(shape)

    def scalars(self, shape: dict) -> dict:
        """The int/float arguments of a call at `shape`, the launch configuration's defaults included."""
        return {**self.module.scalars(shape), **self.launch_values}

    @property
    def launch_values(self) -> dict:
        """The launch configuration the gate passes: the first value of each LAUNCH axis."""
        return {k: v[0] for k, v in self.launch.items()}

    def outside_domain(self, shape: dict) -> list[str]:
        """The conditions of DOMAIN that `shape` violates ([] inside it, or without a DOMAIN)."""
        return domain_violations(self.domain, shape, self.pointer_args)

    def domain_preconditions(self) -> list[dict]:
        """DOMAIN as skill preconditions (category, condition, what fails without it, evidence)."""
        return domain_preconditions(self.domain, self.name)

    def with_launch(self, values: dict) -> "Workload":
        """This workload passing `values` as its launch configuration (a generated workload file, named
        by its content, so its evaluations are keyed apart); WorkloadError for a name that is no axis."""
        return launch_variant(self, values)

    def reference(self, inputs: dict, shape: dict) -> dict:
        return self.module.reference(inputs, shape)

    def vendor(self, inputs: dict, shape: dict) -> dict:
        return self.module.vendor(inputs, shape)

    def bytes_moved(self, shape: dict) -> int:
        return int(self.module.bytes_moved(shape))

    def flops(self, shape: dict) -> int:
        return int(self.module.flops(shape))

    def check(self, inputs: dict, outputs: dict, shape: dict) -> list[str]:
        """Problems the workload's optional check() finds in the outputs; [] without a check."""
        fn = getattr(self.module, "check", None)
        return [] if fn is None else [str(p) for p in fn(inputs, outputs, shape)]

    @property
    def pointer_args(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.kind == "ptr")

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.pointer_args if a.role in ("in", "inout"))

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.pointer_args if a.role in ("out", "inout"))

    @property
    def c_signature(self) -> str:
        params = ", ".join([a.c_decl for a in self.args] + ["cudaStream_t stream"])
        return f'extern "C" cudaError_t {self.entry}({params})'

    @staticmethod
    def pointer_offset(shape: dict) -> int:
        """Elements every pointer argument is offset from an aligned base for this shape (0 if none)."""
        return int(shape.get(OFFSET_KEY, 0))

    def all_shapes(self) -> list[tuple[str, dict]]:
        """(kind, shape) for every benchmark case then every probe shape inside the DOMAIN."""
        return [("benchmark", s) for s in self.benchmark_cases] + [
            ("probe", s) for s in self.probe_shapes if not self.outside_domain(s)]

    def describe(self) -> dict:
        return {
            "name": self.name,
            "family": self.family,
            "dtypes": list(self.dtypes),
            "signature": self.c_signature,
            "benchmark_cases": [dict(s) for s in self.benchmark_cases],
            "probe_shapes": [dict(s) for s in self.probe_shapes],
            "tolerance": vars(self.tolerance),
            "vendor": self.vendor_name,
            "stateful": self.stateful,
            "path": str(self.path),
            "content_hash": self.content_hash,
            **({"domain": self.domain, "probes_outside_domain": [dict(s) for s in self.probe_shapes
                                                                 if self.outside_domain(s)]} if self.domain else {}),
            **({"launch": self.launch} if self.launch else {}),
        }


def shape_key(shape: dict) -> str:
    """Text of a shape in the workload's own key order: 'rows=16384,cols=4096'."""
    return ",".join(f"{k}={v}" for k, v in shape.items())


def _fail(path: Path, name: str, problem: str) -> WorkloadError:
    return WorkloadError(f"{path}: field {name}: {problem}")


def _require(mod, path: Path, name: str, kinds: tuple[type, ...] | type, what: str):
    if not hasattr(mod, name):
        raise _fail(path, name, f"missing (define {name} as {what})")
    value = getattr(mod, name)
    if not isinstance(value, kinds):
        raise _fail(path, name, f"expected {what}, got {type(value).__name__}")
    return value


def _check_args(path: Path, raw) -> tuple[Arg, ...]:
    if not isinstance(raw, (list, tuple)) or not raw:
        raise _fail(path, "ARGS", "expected a non-empty list of argument dicts")
    args: list[Arg] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        where = f"ARGS[{i}]"
        if not isinstance(item, dict):
            raise _fail(path, where, "expected a dict with name and kind")
        unknown = set(item) - {"name", "kind", "dtype", "role"}
        if unknown:
            raise _fail(path, where, f"unknown key(s) {sorted(unknown)}; allowed: name, kind, dtype, role")
        name = item.get("name")
        if not isinstance(name, str) or not name.isidentifier():
            raise _fail(path, where, f"name must be a C identifier, got {name!r}")
        if name in seen:
            raise _fail(path, where, f"duplicate argument name {name!r}")
        seen.add(name)
        kind = item.get("kind")
        if kind == "ptr":
            dtype, role = item.get("dtype"), item.get("role")
            if dtype not in DTYPE_C:
                raise _fail(path, where, f"dtype {dtype!r} unknown; one of {sorted(DTYPE_C)}")
            if role not in ROLES:
                raise _fail(path, where, f"role {role!r} unknown; one of {list(ROLES)}")
            args.append(Arg(name, "ptr", dtype, role))
        elif kind in SCALAR_C:
            if "dtype" in item or "role" in item:
                raise _fail(path, where, "scalar arguments take no dtype or role")
            args.append(Arg(name, kind))
        else:
            raise _fail(path, where, f"kind {kind!r} unknown; one of ['ptr', {', '.join(map(repr, SCALAR_C))}]")
    if not any(a.kind == "ptr" and a.role in ("out", "inout") for a in args):
        raise _fail(path, "ARGS", "no output pointer (role 'out' or 'inout')")
    return tuple(args)


def _check_shapes(path: Path, name: str, raw) -> tuple[dict, ...]:
    if not isinstance(raw, (list, tuple)) or not raw:
        raise _fail(path, name, "expected a non-empty list of shape dicts")
    out = []
    for i, shape in enumerate(raw):
        if not isinstance(shape, dict) or not shape:
            raise _fail(path, f"{name}[{i}]", "expected a non-empty dict of name -> positive int")
        for k, v in shape.items():
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise _fail(path, f"{name}[{i}]", f"{k!r}: {v!r} is not a positive int")
        if shape.get(OFFSET_KEY, 0) > MAX_OFFSET:
            raise _fail(path, f"{name}[{i}]", f"{OFFSET_KEY!r}: {shape[OFFSET_KEY]} elements; at most "
                        f"{MAX_OFFSET} (a misaligned base needs only a few elements)")
        out.append(dict(shape))
    return tuple(out)


def _check_tolerance(path: Path, raw) -> Tolerance:
    if not isinstance(raw, dict):
        raise _fail(path, "TOLERANCE", "expected a dict with rtol, atol, min_matched")
    missing = {"rtol", "atol", "min_matched"} - set(raw)
    if missing:
        raise _fail(path, "TOLERANCE", f"missing key(s) {sorted(missing)}")
    unknown = set(raw) - {"rtol", "atol", "min_matched"}
    if unknown:
        raise _fail(path, "TOLERANCE", f"unknown key(s) {sorted(unknown)}")
    rtol, atol, mm = raw["rtol"], raw["atol"], raw["min_matched"]
    for k, v in (("rtol", rtol), ("atol", atol)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not (0 < v < 1):
            raise _fail(path, "TOLERANCE", f"{k} must be a number in (0, 1), got {v!r}")
    if not isinstance(mm, (int, float)) or isinstance(mm, bool) or not (0.5 < mm <= 1):
        raise _fail(path, "TOLERANCE", f"min_matched must be in (0.5, 1], got {mm!r}")
    return Tolerance(float(rtol), float(atol), float(mm))


def _check_callables(path: Path, mod) -> None:
    for name in CALLABLES:
        fn = getattr(mod, name, None)
        if fn is None:
            raise _fail(path, name, "missing (define it as a function; see klineage/workload.py)")
        if not callable(fn):
            raise _fail(path, name, f"expected a function, got {type(fn).__name__}")
    params = inspect.signature(mod.make_inputs).parameters
    if "device" not in params or len(params) < 3:
        raise _fail(path, "make_inputs", "signature must be make_inputs(shape, seed, device='cpu')")
    if hasattr(mod, "check"):  # optional output validator
        if not callable(mod.check):
            raise _fail(path, "check", f"expected a function, got {type(mod.check).__name__}")
        if len(inspect.signature(mod.check).parameters) != 3:
            raise _fail(path, "check", "signature must be check(inputs, outputs, shape)")


def _check_consistency(path: Path, mod, args: tuple[Arg, ...], shape: dict, launch: dict | None = None) -> None:
    """Call the cheap contract functions on the first benchmark case and check their keys."""
    want_out = {a.name for a in args if a.kind == "ptr" and a.role in ("out", "inout")}
    want_scalar = {a.name for a in args if a.kind != "ptr"} - set(launch or {})
    for fname, want in (("outputs", want_out), ("scalars", want_scalar)):
        try:
            got = getattr(mod, fname)(shape)
        except Exception as exc:  # a broken contract function is a workload error, not a crash
            raise _fail(path, fname, f"raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(got, dict) or set(got) != want:
            raise _fail(path, fname, f"must return a dict with keys {sorted(want)}, got {got!r}")
    for fname in ("bytes_moved", "flops"):
        try:
            value = getattr(mod, fname)(shape)
        except Exception as exc:
            raise _fail(path, fname, f"raised {type(exc).__name__}: {exc}") from exc
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _fail(path, fname, f"must return a non-negative int, got {value!r}")
    for name, (dims, dtype) in mod.outputs(shape).items():
        if dtype not in DTYPE_C:
            raise _fail(path, "outputs", f"{name}: dtype {dtype!r} unknown")


def shared_modules(workload_file: Path, source: bytes | None = None) -> list[Path]:
    """The corpus's own Python files that `workload_file` imports: for each top-level name it imports,
    every .py file of the package of that name (a folder with __init__.py) or the module file
    NAME.py in the corpus folder (the workload folder's parent). Sorted; [] for a workload that
    imports only installed packages."""
    root = workload_file.parent.parent
    try:
        tree = ast.parse(source if source is not None else workload_file.read_bytes())
    except SyntaxError:
        return []  # the import below reports the syntax error
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    files: list[Path] = []
    for n in sorted(names):
        if (root / n / "__init__.py").is_file():
            files += sorted(f for f in (root / n).rglob("*.py") if "__pycache__" not in f.parts)
        elif (root / f"{n}.py").is_file():
            files.append(root / f"{n}.py")
    return files


def write_generated(path: Path, data: bytes) -> None:
    """Write a generated workload file (or a module it imports) atomically through a temporary file
    of its own, leaving it untouched when it already holds `data`: concurrent writers of the same
    content never see a half-written file."""
    if path.is_file() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    Path(tmp).replace(path)


def content_hash(workload_file: Path, source: bytes, shared: list[Path]) -> str:
    """sha256 of workload.py, and of each shared module (its path within the corpus folder and its
    text) when there are any."""
    h = hashlib.sha256(source)
    for f in shared:
        h.update(b"\0" + f.relative_to(workload_file.parent.parent).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def load_workload(path: str | Path) -> Workload:
    """Load and validate a workload from a folder holding workload.py, or the file itself.

    Raises WorkloadError naming the file and the missing or wrong field.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "workload.py"
    if not p.is_file():
        raise WorkloadError(f"{p}: no workload file here (a workload folder must hold workload.py)")
    p = p.resolve()
    source = p.read_bytes()
    shared = shared_modules(p, source)
    if shared and str(p.parent.parent) not in sys.path:
        sys.path.insert(0, str(p.parent.parent))
    mod_name = f"klineage_workload_{hashlib.sha256(str(p).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(mod_name, p)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as exc:
        raise WorkloadError(f"{p}: failed to import: {type(exc).__name__}: {exc}") from exc
    sys.modules[mod_name] = mod

    name = _require(mod, p, "NAME", str, "a str")
    family = _require(mod, p, "FAMILY", str, "a str")
    dtypes = _require(mod, p, "DTYPES", (tuple, list), "a tuple of dtype names")
    for d in dtypes:
        if d not in DTYPE_C:
            raise _fail(p, "DTYPES", f"{d!r} unknown; one of {sorted(DTYPE_C)}")
    entry = _require(mod, p, "ENTRY", str, "a str naming the extern \"C\" entry point")
    if not entry.isidentifier():
        raise _fail(p, "ENTRY", f"{entry!r} is not a C identifier")
    args = _check_args(p, _get(mod, p, "ARGS"))
    tol = _check_tolerance(p, _get(mod, p, "TOLERANCE"))
    cases = _check_shapes(p, "BENCHMARK_CASES", _get(mod, p, "BENCHMARK_CASES"))
    probes = _check_shapes(p, "PROBE_SHAPES", _get(mod, p, "PROBE_SHAPES"))
    vendor_name = _require(mod, p, "VENDOR_NAME", str, "a str saying what vendor() runs")
    stateful = getattr(mod, "STATEFUL", False)
    if not isinstance(stateful, bool):
        raise _fail(p, "STATEFUL", f"expected a bool, got {type(stateful).__name__}")
    budget = getattr(mod, "TIMING_BUDGET_S", None)
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget <= 0):
        raise _fail(p, "TIMING_BUDGET_S", f"expected a positive number of seconds, got {budget!r}")
    _check_callables(p, mod)
    launch = _check_launch(p, getattr(mod, "LAUNCH", None), args)
    domain = _check_domain(p, getattr(mod, "DOMAIN", None), cases + probes)
    ptrs = tuple(a for a in args if a.kind == "ptr")
    for i, shape in enumerate(cases):
        bad = domain_violations(domain, shape, ptrs)
        if bad:
            raise _fail(p, f"BENCHMARK_CASES[{i}]", f"{shape_key(shape)} lies outside DOMAIN ({bad[0]}): "
                        "change the case or the domain")
    for shape in cases + probes:
        _check_consistency(p, mod, args, shape, launch)
    return Workload(
        name=name, family=family, dtypes=tuple(dtypes), entry=entry, args=args, tolerance=tol,
        benchmark_cases=cases, probe_shapes=probes, vendor_name=vendor_name, stateful=stateful,
        path=p, content_hash=content_hash(p, source, shared), module=mod,
        timing_budget_s=None if budget is None else float(budget), domain=domain, launch=launch,
    )


# ---------------------------------------------------------------------------- domain and launch
DOMAIN_KEYS = ("multiple_of", "at_least", "aligned_bytes")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int32": 4, "int64": 8, "uint8": 1, "int8": 1}


def _term_value(term: str, shape: dict) -> int | None:
    """The value of a domain term (a shape key or keys joined by "*") at `shape`; None when a key is absent."""
    n = 1
    for k in term.split("*"):
        k = k.strip()
        if k not in shape:
            return None
        n *= shape[k]
    return n


def _check_domain(path: Path, raw, shapes: tuple[dict, ...]) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not raw:
        raise _fail(path, "DOMAIN", f"expected a dict with some of {list(DOMAIN_KEYS)}, got {raw!r}")
    unknown = sorted(set(raw) - set(DOMAIN_KEYS))
    if unknown:
        raise _fail(path, "DOMAIN", f"unknown key {unknown[0]!r}; allowed: {', '.join(DOMAIN_KEYS)}")
    keys = {k for s in shapes for k in s}
    out: dict = {}
    for part in ("multiple_of", "at_least"):
        table = raw.get(part)
        if table is None:
            continue
        if not isinstance(table, dict) or not table:
            raise _fail(path, f"DOMAIN[{part!r}]", "expected a dict of shape key (or KEY*KEY) -> positive int")
        for term, v in table.items():
            names = [t.strip() for t in str(term).split("*")]
            if not all(n.isidentifier() for n in names) or any(n not in keys for n in names):
                raise _fail(path, f"DOMAIN[{part!r}]", f"{term!r} is not a shape key or a product of shape keys "
                            f"(keys: {', '.join(sorted(keys))})")
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise _fail(path, f"DOMAIN[{part!r}]", f"{term!r}: {v!r} is not a positive int")
        out[part] = {"*".join(t.strip() for t in str(k).split("*")): v for k, v in table.items()}
    if "aligned_bytes" in raw:
        a = raw["aligned_bytes"]
        if isinstance(a, bool) or not isinstance(a, int) or a <= 0 or a & (a - 1) or a > 256:
            raise _fail(path, "DOMAIN['aligned_bytes']", f"{a!r}: expected a power of two up to 256")
        out["aligned_bytes"] = a
    return out


def domain_violations(domain: dict, shape: dict, pointers: tuple[Arg, ...] = ()) -> list[str]:
    """The conditions of `domain` that `shape` violates, as text; [] when it lies inside."""
    bad = []
    for term, m in domain.get("multiple_of", {}).items():
        v = _term_value(term, shape)
        if v is not None and v % m:
            bad.append(f"{term} = {v} is not a multiple of {m}")
    for term, lo in domain.get("at_least", {}).items():
        v = _term_value(term, shape)
        if v is not None and v < lo:
            bad.append(f"{term} = {v} is under {lo}")
    align = domain.get("aligned_bytes")
    off = int(shape.get(OFFSET_KEY, 0))
    if align and off:
        for a in pointers:
            if (off * DTYPE_BYTES[a.dtype]) % align:
                bad.append(f"{a.name} starts {off * DTYPE_BYTES[a.dtype]} bytes past a {align}-byte boundary")
                break
    return bad


def domain_preconditions(domain: dict, workload: str) -> list[dict]:
    """One layout precondition per condition of a declared DOMAIN."""
    conds = ([f"{t} is a multiple of {m}" for t, m in domain.get("multiple_of", {}).items()]
             + [f"{t} is at least {lo}" for t, lo in domain.get("at_least", {}).items()]
             + ([f"every pointer argument is aligned to {domain['aligned_bytes']} bytes"]
                if domain.get("aligned_bytes") else []))
    return [{"category": "layout", "condition": c,
             "fails_without": "outside the domain its kernels were written for; nothing there was run",
             "evidence": f"the DOMAIN the workload {workload} declares: the kernels were mined only inside it"}
            for c in conds]


def _check_launch(path: Path, raw, args: tuple[Arg, ...]) -> dict:
    if raw is None:
        return {}
    ints = {a.name for a in args if a.kind in ("int", "int64")}
    if not isinstance(raw, dict) or not raw:
        raise _fail(path, "LAUNCH", f"expected a dict of int argument name -> list of values, got {raw!r}")
    out = {}
    for name, values in raw.items():
        if name not in ints:
            raise _fail(path, "LAUNCH", f"{name!r} is not an int argument of ARGS: add {{\"name\": {name!r}, "
                        "\"kind\": \"int\"}} to ARGS where the entry point takes it")
        if (not isinstance(values, (list, tuple)) or not values
                or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)
                or len(set(values)) != len(values)):
            raise _fail(path, "LAUNCH", f"{name!r}: {values!r} is not a list of distinct positive ints "
                        "(the first is the default)")
        out[name] = list(values)
    return out


_LAUNCH_APPENDIX = '''

# ---- generated by klineage.workload.launch_variant: this launch configuration first ----
LAUNCH = {launch!r}
'''


def launch_variant(wl: Workload, values: dict) -> Workload:
    """`wl` with `values` as the launch configuration the gate passes (see Workload.with_launch)."""
    from klineage import settings
    bad = sorted(set(values) - set(wl.launch))
    if bad:
        raise WorkloadError(f"{wl.path}: {bad[0]!r} is not a LAUNCH axis of {wl.name} "
                            f"(axes: {', '.join(wl.launch) or 'none'})")
    launch = {k: [values[k]] + [v for v in vals if v != values[k]] if k in values else vals
              for k, vals in wl.launch.items()}
    if launch == wl.launch:
        return wl
    text = Path(wl.path).read_text() + _LAUNCH_APPENDIX.format(launch=launch)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    d = settings.data_dir() / "launch" / f"{wl.name}-{digest}"
    corpus = Path(wl.path).parent.parent
    for src in shared_modules(Path(wl.path)):
        write_generated(d.parent / src.relative_to(corpus), src.read_bytes())
    write_generated(d / "workload.py", text.encode())
    return load_workload(d)


def _get(mod, path: Path, name: str):
    if not hasattr(mod, name):
        raise _fail(path, name, "missing (see klineage/workload.py for the contract)")
    return getattr(mod, name)


def find_workload_for(kernel: str | Path) -> Path:
    """The workload folder of a kernel: the nearest ancestor folder holding workload.py."""
    k = Path(kernel).resolve()
    for d in [k.parent, *k.parent.parents][:4]:
        if (d / "workload.py").is_file():
            return d
    raise WorkloadError(f"{kernel}: no workload.py in its folder or the 3 above it; pass --workload DIR")
