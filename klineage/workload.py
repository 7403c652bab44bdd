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
                A kernel may declare a domain of its own in its first lines, as JSON in the same form:
                `// klineage-domain: {"multiple_of": {"C": 4}}`. It replaces DOMAIN for that kernel
                (Workload.for_kernel): the gate skips the probe shapes outside it, and a step's
                skill carries the domain of the richer kernel, not the narrowest rung's.
    LAUNCH      (optional) launch configurations the entry point takes as int arguments:
                {"block": [256, 128, 512]} for an ARGS entry {"name": "block", "kind": "int"}.
                The first value is the one the gate passes; the others are the axis a sweep may
                try (Workload.with_launch gives the workload that passes them). scalars(shape)
                leaves such an argument out. `klineage gate` evaluates a kernel at every launch
                configuration (launch_configs), and a walk accepts a step only when its simpler
                kernel passes at each.
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
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from klineage.errors import WorkloadError
from klineage.workload_schema import (ALIAS_KEY, OFFSET_KEY, Arg, Tolerance, check_fields, domain_preconditions,
                                      domain_violations, shape_key)

__all__ = ["ALIAS_KEY", "OFFSET_KEY", "Arg", "Tolerance", "Workload", "domain_variant", "find_workload_for",
           "kernel_domain", "launch_variant",
           "load_workload", "shape_key", "shared_modules", "write_generated"]


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

    def launch_configs(self) -> list[dict]:
        """The launch configurations a kernel is checked at: the default (each axis's first value),
        then each other value of one axis with the rest at their defaults; [] without LAUNCH."""
        if not self.launch:
            return []
        base = self.launch_values
        return [base] + [{**base, k: v} for k, vals in self.launch.items() for v in vals[1:]]

    def for_kernel(self, source: str) -> "Workload":
        """The workload as one kernel declares it valid: this one, or, when the kernel's first lines
        declare a domain of its own (`// klineage-domain: {...}`), a generated variant whose DOMAIN is
        that one (keyed apart, as a launch variant is). WorkloadError names a malformed declaration."""
        domain = kernel_domain(source, self.path)
        return self if domain is None or domain == self.domain else domain_variant(self, domain)

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
    return Workload(**check_fields(p, mod), path=p, content_hash=content_hash(p, source, shared), module=mod)


_APPENDIX = '''

# ---- generated by klineage.workload.{how}: {what} ----
{name} = {value!r}
'''
KERNEL_DOMAIN = re.compile(r"//\s*klineage-domain:\s*(\{.*\})\s*$", re.M)
KERNEL_HEADER_LINES = 8  # a kernel's domain is read from its first lines only


def _variant(wl: Workload, kind: str, how: str, what: str, name: str, value) -> Workload:
    """`wl` with `name` set to `value` at the end of its file: a generated workload named by its
    content under the data folder's `kind`, its shared modules beside it."""
    from klineage import settings
    text = Path(wl.path).read_text() + _APPENDIX.format(how=how, what=what, name=name, value=value)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    d = settings.data_dir() / kind / f"{wl.name}-{digest}"
    corpus = Path(wl.path).parent.parent
    for src in shared_modules(Path(wl.path)):
        write_generated(d.parent / src.relative_to(corpus), src.read_bytes())
    write_generated(d / "workload.py", text.encode())
    return load_workload(d)


def launch_variant(wl: Workload, values: dict) -> Workload:
    """`wl` with `values` as the launch configuration the gate passes (see Workload.with_launch)."""
    bad = sorted(set(values) - set(wl.launch))
    if bad:
        raise WorkloadError(f"{wl.path}: {bad[0]!r} is not a LAUNCH axis of {wl.name} "
                            f"(axes: {', '.join(wl.launch) or 'none'})")
    launch = {k: [values[k]] + [v for v in vals if v != values[k]] if k in values else vals
              for k, vals in wl.launch.items()}
    if launch == wl.launch:
        return wl
    return _variant(wl, "launch", "launch_variant", "this launch configuration first", "LAUNCH", launch)


def kernel_domain(source: str, where: str | Path = "the kernel") -> dict | None:
    """The domain a kernel declares in its first lines (`// klineage-domain: {json}`), or None."""
    m = KERNEL_DOMAIN.search("\n".join(source.splitlines()[:KERNEL_HEADER_LINES]))
    if m is None:
        return None
    try:
        domain = json.loads(m.group(1))
    except json.JSONDecodeError as e:
        raise WorkloadError(f"{where}: klineage-domain is not JSON ({e.msg}): write it as DOMAIN is written, "
                            'e.g. // klineage-domain: {"multiple_of": {"C": 4}}') from None
    if not isinstance(domain, dict):
        raise WorkloadError(f"{where}: klineage-domain must be a JSON object, as DOMAIN is")
    return domain


def domain_variant(wl: Workload, domain: dict) -> Workload:
    """`wl` with `domain` as its DOMAIN (see Workload.for_kernel); the variant's load checks it."""
    return _variant(wl, "domain", "domain_variant", "the domain a kernel declares", "DOMAIN", domain)


def find_workload_for(kernel: str | Path) -> Path:
    """The workload folder of a kernel: the nearest ancestor folder holding workload.py."""
    k = Path(kernel).resolve()
    for d in [k.parent, *k.parent.parents][:4]:
        if (d / "workload.py").is_file():
            return d
    raise WorkloadError(f"{kernel}: no workload.py in its folder or the 3 above it; pass --workload DIR")
