"""Dynamic probing: run every kernel state of a lineage on stress probes, and turn a probe that the
richer kernel of a step fails and the simpler one passes into a precondition and a risk.

The gate already holds every state to the workload's own benchmark and probe shapes. The probe set
here goes further, in ways the workload's contract may not promise:

  ragged_size      each of the workload's probe shapes (sizes off the vector width, the tile, the warp)
  tiny_size        the smallest of them
  misaligned_base  each probe shape again with every pointer one element past 16-byte alignment
  large_magnitude  the largest probe shape with every floating-point input scaled by 1000 (or only
                   those a workload's stress.py names in LARGE_MAGNITUDE_INPUTS)
  <workload's>     each entry of the workload's optional VALUE_PROBES = {name: fn(inputs, shape)
                   -> inputs}, on the largest probe shape (e.g. rows of -inf logits); the table may
                   also sit in a `stress.py` beside workload.py, so adding a probe leaves the
                   workload's hash (and every stored evaluation of it) unchanged
  aliased_output   each probe shape with every output passed as the very buffer of an input of the
                   same shape and dtype (an in-place call), where the workload has such a pair

A probe run is a correctness-only gate evaluation of the kernel against a generated *probe
workload*: the workload file's own text with the probe list and the input transforms appended, so
its content hash (and so the evaluation's key) is the same on every machine and replays like any
other record. All probes run in one evaluation; if it dies (illegal address, timeout) each probe is
run alone, so one crash does not hide the verdict of the others.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

from klineage import settings
from klineage.errors import ReplayMissingError
from klineage.gate.gate import Gate, Status, kernel_hash
from klineage.workload import (ALIAS_KEY, OFFSET_KEY, Workload, load_workload, shape_key, shared_modules,
                               write_generated)

VALUES_KEY = "values"  # reserved key of a generated probe shape: which input transform applies
LARGE_SCALE = 1000.0
PROBE_VERSION = "2"
STRESS_FILE = "stress.py"  # optional VALUE_PROBES table beside a workload.py

# probe kind -> (precondition category, the condition the probe violates, what happens without it)
KIND_TEXT = {
    "misaligned_base": ("layout", "every pointer argument is aligned to 16 bytes",
                        "a base offset by one element"),
    "ragged_size": ("layout", "sizes are multiples of the kernel's vector width / tile / warp",
                    "a size off the vector width or tile"),
    "tiny_size": ("layout", "sizes are at least one full tile / warp / vector",
                  "a size below one tile"),
    "large_magnitude": ("data_types", "input magnitudes stay moderate (|x| well below 1e3)",
                        "inputs scaled by 1000"),
    "value": ("data_types", "inputs are free of the special values this probe plants",
              "special input values"),
    "aliased_output": ("storage", "outputs do not alias inputs (no in-place call)",
                       "each output passed as the buffer of a same-shaped input"),
}


@dataclass(frozen=True)
class Probe:
    name: str       # unique within the set, e.g. "misaligned_base:rows=3,cols=7"
    kind: str       # a key of KIND_TEXT
    shape: dict     # the shape the kernel runs (with the reserved keys "offset" / "values")


def probe_set(wl: Workload) -> list[Probe]:
    """The stress probes of a workload, in a fixed order; none outside the workload's DOMAIN (a
    workload that declares one is not probed where its kernels were never meant to run)."""
    base = [dict(s) for s in wl.probe_shapes if not wl.outside_domain(s)]
    if not base:
        return []
    probes: list[Probe] = []
    for s in base:
        probes.append(Probe(f"ragged_size:{shape_key(s)}", "ragged_size", s))
    tiny = min(base, key=_numel)
    probes.append(Probe(f"tiny_size:{shape_key(tiny)}", "tiny_size", tiny))
    for s in base:
        if OFFSET_KEY not in s:
            m = {**s, OFFSET_KEY: 1}
            probes.append(Probe(f"misaligned_base:{shape_key(s)}", "misaligned_base", m))
    largest = max((s for s in base if OFFSET_KEY not in s), key=_numel, default=max(base, key=_numel))
    probes.append(Probe(f"large_magnitude:{shape_key(largest)}", "large_magnitude", {**largest, VALUES_KEY: 1}))
    for i, name in enumerate(sorted(value_probes(wl)), start=2):
        probes.append(Probe(f"value:{name}:{shape_key(largest)}", "value", {**largest, VALUES_KEY: i}))
    for s in base:
        if OFFSET_KEY not in s and aliasable(wl, s):
            probes.append(Probe(f"aliased_output:{shape_key(s)}", "aliased_output", {**s, ALIAS_KEY: 1}))
    seen, out = set(), []
    for p in probes:
        if p.name not in seen and not wl.outside_domain(p.shape):
            seen.add(p.name)
            out.append(p)
    return out


def _stress_text(wl: Workload) -> str:
    f = Path(wl.path).parent / STRESS_FILE
    return f.read_text() if f.is_file() else ""


def _stress_scope(wl: Workload) -> dict:
    """The names the workload's stress.py defines (empty without one)."""
    text = _stress_text(wl)
    scope: dict = {}
    if text:
        exec(compile(text, str(Path(wl.path).parent / STRESS_FILE), "exec"), scope)
    return scope


def value_probes(wl: Workload) -> list[str]:
    """Names of the workload's VALUE_PROBES (from the workload module or its stress.py)."""
    names = set(getattr(wl.module, "VALUE_PROBES", {}) or {})
    names |= set(_stress_scope(wl).get("VALUE_PROBES", {}) or {})
    return sorted(names)


def large_magnitude_inputs(wl: Workload) -> tuple[str, ...] | None:
    """The inputs the large_magnitude probe scales, where the workload's stress.py restricts them
    (LARGE_MAGNITUDE_INPUTS: those whose contract allows any magnitude, e.g. not a gate in [0, 1]);
    None: every floating-point input."""
    names = _stress_scope(wl).get("LARGE_MAGNITUDE_INPUTS")
    return None if names is None else tuple(sorted(names))


def aliasable(wl: Workload, shape: dict) -> bool:
    """Whether at `shape` some output has the shape and dtype of some input (the worker passes such
    an output as that input's buffer under the alias key)."""
    try:
        ins = wl.make_inputs(shape, 1, device="cpu")
        outs = wl.outputs(shape)
    except Exception:  # a workload that cannot build its inputs on the CPU is simply not probed so
        return False
    have = {(tuple(t.shape), str(t.dtype).replace("torch.", "")) for t in ins.values()}
    return any((tuple(dims), dtype) in have for dims, dtype in outs.values())


def _numel(shape: dict) -> int:
    n = 1
    for k, v in shape.items():
        if k not in (OFFSET_KEY, VALUES_KEY, ALIAS_KEY):
            n *= v
    return n


_APPENDIX = '''

# ---- generated by klineage.lineage.probe (version {version}): stress probes of this workload ----
NAME = {name!r}
BENCHMARK_CASES = {shapes!r}
PROBE_SHAPES = BENCHMARK_CASES[:1]
_KL_VALUE_PROBES = [None, "large_magnitude"] + sorted(globals().get("VALUE_PROBES", {{}}) or {{}})
_kl_base_make_inputs = make_inputs


def make_inputs(shape, seed, device="cpu"):
    plain = {{k: v for k, v in shape.items() if k != {values!r}}}
    inputs = _kl_base_make_inputs(plain, seed, device=device)
    which = _KL_VALUE_PROBES[shape.get({values!r}, 0)]
    if which == "large_magnitude":
        inputs = {{k: (t * {scale!r}).to(t.dtype) if t.is_floating_point() else t for k, t in inputs.items()}}
    elif which is not None:
        inputs = VALUE_PROBES[which](inputs, plain)
    return inputs
'''


# Appended only for a workload whose stress.py names LARGE_MAGNITUDE_INPUTS (every other generated
# probe workload, and so its records, stays as it was): the large_magnitude probe scales those alone.
_SCALED_ONLY = '''

# ---- large_magnitude scales only {names!r} (LARGE_MAGNITUDE_INPUTS of {stress}) ----
_kl_probe_make_inputs = make_inputs


def make_inputs(shape, seed, device="cpu"):
    if _KL_VALUE_PROBES[shape.get({values!r}, 0)] != "large_magnitude":
        return _kl_probe_make_inputs(shape, seed, device=device)
    plain = {{k: v for k, v in shape.items() if k != {values!r}}}
    inputs = _kl_base_make_inputs(plain, seed, device=device)
    return {{k: (t * {scale!r}).to(t.dtype) if k in {names!r} else t for k, t in inputs.items()}}
'''


def probe_workload(wl: Workload, probes: list[Probe]) -> Workload:
    """The generated workload that runs `probes` as its benchmark cases (written under the cache
    dir, named by its content, so equal inputs give the same file and hash everywhere)."""
    text = Path(wl.path).read_text()  # the workload file itself
    stress = _stress_text(wl)
    if stress:
        text += f"\n\n# ---- {STRESS_FILE} of this workload ----\n" + stress
    text += _APPENDIX.format(version=PROBE_VERSION, name=f"{wl.name}", shapes=[p.shape for p in probes],
                             values=VALUES_KEY, scale=LARGE_SCALE)
    scaled = large_magnitude_inputs(wl)
    if scaled is not None:
        text += _SCALED_ONLY.format(names=scaled, stress=STRESS_FILE, values=VALUES_KEY, scale=LARGE_SCALE)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    d = settings.data_dir() / "probes" / f"{wl.name}-{digest}"
    f = d / "workload.py"
    # the shared modules the workload imports go beside it at the same place within the corpus
    # folder, so the generated file imports them and its hash covers them as the original's does
    corpus = Path(wl.path).parent.parent
    for src in shared_modules(Path(wl.path)):
        write_generated(d.parent / src.relative_to(corpus), src.read_bytes())
    write_generated(f, text.encode())
    return load_workload(d)


def probe_gate(gate: Gate) -> Gate:
    """A gate sharing `gate`'s store and worker that checks correctness only (no timing)."""
    c = gate.config
    return gate.with_config(replace(c, seeds=c.seeds[:2], timing={}, shapes="benchmark", round=1))


def _verdicts(res, probes: list[Probe]) -> dict[str, dict] | None:
    """Per probe {ok, status, message, eval_key} from one evaluation, or None when it cannot say
    (the run died before every shape was checked)."""
    if res.status is Status.PASSED:
        return {p.name: {"ok": True, "status": "PASSED", "message": "", "eval_key": res.eval_key} for p in probes}
    if res.status is Status.INCORRECT and len(res.correctness) == len(probes):
        out = {}
        for p, c in zip(probes, res.correctness):
            why = ""
            if not c["ok"]:
                seed = next(s for s in c["seeds"] if not s["ok"])
                why = "; ".join([f"{k}: {v['reason']}" for k, v in seed["outputs"].items() if not v["ok"]]
                                + [f"check: {x}" for x in seed.get("check", [])[:2]]
                                + ([f"inputs mutated: {seed['mutated_inputs']}"] if seed.get("mutated_inputs") else []))
            out[p.name] = {"ok": c["ok"], "status": "PASSED" if c["ok"] else "INCORRECT",
                           "message": why[:400], "eval_key": res.eval_key}
        return out
    if len(probes) == 1:
        return {probes[0].name: {"ok": False, "status": res.status.value,
                                 "message": f"{res.error_kind}: {res.error_message}"[:400], "eval_key": res.eval_key}}
    return None


class Prober:
    """Probe kernel states of one workload; results cached per kernel hash."""

    def __init__(self, gate: Gate, wl: Workload, replay: bool = False):
        self.gate = probe_gate(gate)
        self.wl = wl
        self.replay = replay
        self.probes = probe_set(wl)
        self.all_wl = probe_workload(wl, self.probes) if self.probes else None
        self.cache: dict[str, dict] = {}
        self.missing: list[dict] = []

    def run(self, source: str) -> dict | None:
        """{"probes": [{name, kind, shape, ok, status, message, eval_key}], "tried": [names]}, or
        None when a replay lacks a record."""
        h = kernel_hash(source)
        if h in self.cache:
            return self.cache[h]
        if not self.probes:  # every probe shape lies outside the workload's DOMAIN
            self.cache[h] = {"probes": [], "tried": []}
            return self.cache[h]
        try:
            verdicts = _verdicts(self.gate.evaluate(source, self.all_wl, replay=self.replay), self.probes)
            if verdicts is None:
                verdicts = {}
                for p in self.probes:
                    one = probe_workload(self.wl, [p])
                    verdicts.update(_verdicts(self.gate.evaluate(source, one, replay=self.replay), [p]))
        except ReplayMissingError as e:
            self.missing.append({"kernel_hash": h, "workload": self.wl.name, "what": "probes", "message": str(e)})
            self.cache[h] = None
            return None
        out = {"probes": [{"name": p.name, "kind": p.kind, "shape": p.shape, **verdicts[p.name]} for p in self.probes],
               "tried": [p.name for p in self.probes]}
        self.cache[h] = out
        return out


def derive(richer: dict | None, simpler: dict | None, mechanism: str, kernel: str) -> dict:
    """What a step's probes say: preconditions and risks for each probe the richer kernel fails
    and the simpler one passes; the probes tried; and probes both fail (not this step's doing)."""
    if richer is None or simpler is None:
        return {"preconditions": [], "risks": [], "tried": [], "both_fail": [], "probed": False}
    by_name = {p["name"]: p for p in simpler["probes"]}
    pre, risks, both = [], [], []
    for p in richer["probes"]:
        s = by_name.get(p["name"])
        if p["ok"] or s is None:
            continue
        if not s["ok"]:
            both.append(p["name"])
            continue
        cat, cond, violation = KIND_TEXT[p["kind"]]
        pre.append({"category": cat, "condition": cond,
                    "fails_without": f"{p['status']} on {violation}: {p['message']}",
                    "evidence": f"probe {p['name']}: the kernel with {mechanism} fails ({p['status']}), "
                                f"the kernel without it passes",
                    "probe": p["name"], "eval_key": p["eval_key"], "kernel": kernel, "lines": None})
        risks.append({"kind": "probe", "probe": p["name"], "status": p["status"], "message": p["message"],
                      "eval_key": p["eval_key"], "shape": p["shape"]})
    return {"preconditions": pre, "risks": risks, "tried": [p["name"] for p in richer["probes"]],
            "both_fail": both, "probed": True}
