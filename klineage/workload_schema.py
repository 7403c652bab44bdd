"""The fields of a workload file (see klineage.workload for the contract), each checked.

The argument and tolerance records, the reserved shape keys, and one check per field: ARGS, the shape
lists, TOLERANCE, the contract functions and what they return, DOMAIN and LAUNCH. Every check raises
``WorkloadError`` naming the file and the field.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

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


def _get(mod, path: Path, name: str):
    if not hasattr(mod, name):
        raise _fail(path, name, "missing (see klineage/workload.py for the contract)")
    return getattr(mod, name)



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


def check_fields(p: Path, mod) -> dict:
    """The checked fields of the workload module `mod` loaded from `p`, as Workload's keyword
    arguments (all but path, content_hash and module); WorkloadError naming the first bad field."""
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
    return dict(name=name, family=family, dtypes=tuple(dtypes), entry=entry, args=args, tolerance=tol,
                benchmark_cases=cases, probe_shapes=probes, vendor_name=vendor_name, stateful=stateful,
                timing_budget_s=None if budget is None else float(budget), domain=domain, launch=launch)
