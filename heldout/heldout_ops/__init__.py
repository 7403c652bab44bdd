"""Code the held-out instances share: one module per operator (attention, rmsnorm, layernorm, softmax,
add_rmsnorm, mm, bmm, addmm, grouped_mm), the GEMM tolerance of the last four (gemm) and the FlagGems
import the non-attention instances share (flag_gems_ref).

An instance's workload.py keeps what is its own (its docstring, NAME, BENCHMARK_CASES, PROBE_SHAPES
and, for attention, CAUSAL and GQA) and takes every other name of the workload contract from its
operator's module:

    from heldout_ops.rmsnorm import define
    NAME = "rmsnorm_16384x4096"
    BENCHMARK_CASES = [...]
    PROBE_SHAPES = [...]
    globals().update(define(globals()))

define(ns) reads the instance's own facts from ns and returns the rest: constants (fresh copies for each
instance, as separate files had), the modules the functions use, the state they keep between calls
(_vendor_fn, _fallback: None until the first call), and the functions. Each function is a copy of the
module's template bound to the instance's namespace (`bind`), so it runs as if it had been written in
workload.py: it reads and writes that module's globals, never this package's. So the instance's NAME
names it in messages, the first vendor call caches FlagGems' function in the instance module only, a
probe workload's appended make_inputs (klineage.lineage.probe) or the fallback shim's `vendor =
vendor_fallback` (klineage.heldout.instances) take effect as they do on a self-contained file, and a
test's monkeypatch of wl.module._fallback or _REF_ELEMS reaches the function that reads it. The
templates are therefore never called here, and the names they read (NAME, CAUSAL, EPS, ...) need not
exist in their own module.

The loader (klineage.workload.load_workload) puts heldout/ on the import path for a workload that
imports this package, and hashes every .py file of it into the workload's content hash
(shared_modules): an edit here re-keys every instance built on it. Imports are absolute (a probe
workload carries a copy of the package to another folder). The instances' stress.py tables stay out of
this package on purpose: they live apart from workload.py so that adding a stress probe leaves the
workload's hash (and its stored evaluations) unchanged, which a table in here would not.
"""
import copy
import types


def bind(ns: dict, *functions) -> dict:
    """{name: copy of the function whose globals are `ns`} for module-level template functions: the copy
    looks its global names up in `ns` (the instance module's own namespace) at each call, and its
    __module__ is that module's."""
    out = {}
    for f in functions:
        if f.__closure__ is not None:
            raise TypeError(f"{f.__qualname__}: bind() takes module-level functions (no closures)")
        g = types.FunctionType(f.__code__, ns, f.__name__, f.__defaults__, None)
        g.__kwdefaults__ = copy.copy(f.__kwdefaults__)
        g.__doc__ = f.__doc__
        g.__qualname__ = f.__qualname__
        g.__annotations__ = dict(f.__annotations__)
        g.__dict__.update(f.__dict__)
        out[f.__name__] = g
    return out


def fresh(**values) -> dict:
    """The constants of one instance: deep copies, so no two instances share a list or dict (as no two
    self-contained workload files did)."""
    return copy.deepcopy(values)
