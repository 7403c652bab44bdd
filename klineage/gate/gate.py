"""The gate: guard -> compile -> (live worker | recorded replay) -> a typed, stored result.

Every path returns a GateResult; a bad kernel is a recorded status, never an exception. Evaluations
are content-addressed: the request (kernel hash, workload hash, shapes, seeds, timing settings,
arch, nvcc version, gate version) plus the GPU name give the key, so re-running an identical
request reuses the stored record unless `remeasure` is set, and `replay` finds a recorded
measurement of the same request on any GPU.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from klineage.errors import NoDeviceError, ReplayMissingError
from klineage.gate.compile import ARCH_SPECIFIC, DEFAULT_ARCH, CompileResult, nvcc_version, targets_from
from klineage.gate.guard import check_source
from klineage.records.evaluation import Status  # noqa: F401  (gate.Status: its importers)
from klineage.workload import Workload

GATE_VERSION = "1"
DEFAULT_SEEDS = (1, 2, 3)
DEFAULT_TIMING = {"warmup": 10, "reps": 50, "trials": 3, "floor_factor": 0.9}




@dataclass
class GateResult:
    status: Status
    kernel_hash: str
    workload: str
    eval_key: str
    source: str  # "live" | "stored" | "replayed" | "static"
    guard: dict
    compile: dict | None = None
    correctness: list = field(default_factory=list)
    activity: dict | None = None
    timing: list = field(default_factory=list)  # only when PASSED
    env: dict | None = None
    error_kind: str | None = None
    error_message: str | None = None
    wall_s: float | None = None
    phases: dict | None = None  # worker seconds spent in correctness and in timing

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_record(cls, rec: dict, source: str) -> "GateResult":
        r = rec["result"]
        return cls(status=Status(rec["status"]), kernel_hash=rec["kernel_hash"], workload=rec["workload_name"],
                   eval_key=rec["eval_key"], source=source, guard=r.get("guard", {}), compile=r.get("compile"),
                   correctness=r.get("correctness", []), activity=r.get("activity"), timing=r.get("timing", []),
                   env=rec.get("env") or None, error_kind=r.get("error_kind"),
                   error_message=r.get("error_message"), wall_s=r.get("wall_s"),
                   phases=r.get("phases"))


def kernel_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


@dataclass
class GateConfig:
    arch: str = DEFAULT_ARCH
    extra_flags: tuple[str, ...] = ()
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    timing: dict = field(default_factory=lambda: dict(DEFAULT_TIMING))
    shapes: str = "all"  # "all" (benchmark + probes) | "benchmark"
    guard: bool = True  # False only for gallery experiments that test the dynamic defenses
    stall_s: float = 60.0
    total_s: float = 900.0
    round: int = 1  # >1: a repeat measurement (in another worker process: Gate.repeat), keyed apart from round 1


_FIELD_NAMES = {"timing": "timing", "flags": "sweep flags", "round": "timing round", "shapes": "shapes",
                "seeds": "seeds", "arch": "arch", "guard": "guard"}


def _show(v) -> str:
    if isinstance(v, list) and v and isinstance(v[0], dict) and "shape" in v[0]:
        return f"{len(v)} shapes"
    if isinstance(v, dict):
        return ", ".join(f"{k} {x}" for k, x in sorted(v.items()))
    return "none" if v is None or v == [] else (" ".join(map(str, v)) if isinstance(v, list) else str(v))


# Instructions that build for some targets only: (pattern, what, the targets that have it). "wgmma" here
# is the instruction as nvcc names it, not the family (the gate sits below the mechanism families).
_ARCH_ONLY = (
    (re.compile(r"\bwgmma\."), "wgmma", ("sm_90a",)),
    (re.compile(r"\bsetmaxnreg\b"), "setmaxnreg", ARCH_SPECIFIC),
    (re.compile(r"cp\.async\.bulk|cp\.reduce\.async\.bulk"), "TMA (cp.async.bulk)", targets_from("sm_90")),
    (re.compile(r"__cluster_dims__|cudaLaunchKernelEx|\bcluster\.sync\(|%cluster_"), "thread-block clusters",
     targets_from("sm_90")),
)


def arch_needs(source: str, arch: str | None = None) -> str | None:
    """A sentence naming the instructions of `source` that only some targets build and which targets
    those are, when `arch` (None: any) is not one of them; None when nothing restricts it."""
    needs = [(what, targets) for rx, what, targets in _ARCH_ONLY if rx.search(source)]
    bad = [(w, t) for w, t in needs if arch is None or arch not in t]
    if not bad:
        return None
    common = set.intersection(*(set(t) for _, t in needs))
    from klineage.gate.compile import ARCHS
    allowed = [a for a in ARCHS if a in common]
    uses = ", ".join(w for w, _ in needs)
    where = f"only {', '.join(allowed)} build{'s' if len(allowed) == 1 else ''} it" if allowed else "no single target builds it"
    return (f"the kernel uses {uses}: {where}" + (f" (gate it with --arch {allowed[0]} on such a GPU)" if allowed
                                                  and arch is not None else ""))


def gate_config_for(table: dict | None, **kw) -> GateConfig:
    """The GateConfig of a run configuration's [gate] table: its timing keys over DEFAULT_TIMING, and
    its arch (default DEFAULT_ARCH)."""
    t = dict(table or {})
    arch = t.pop("arch", None) or DEFAULT_ARCH
    return GateConfig(arch=arch, timing={**DEFAULT_TIMING, **t}, **kw)


class Gate:
    """Evaluate kernels for workloads. `store` is a klineage.store Store (or None: nothing kept);
    `worker` a klineage.gate.pool.GateWorker started on first live use. Builds and live evaluations
    run in the `executor` (klineage.exec), in its worker `group`: without one, a SerialExecutor of
    this gate's own (this process, `worker` its group's), closed with the gate; with a concurrent
    one, concurrent requests of the same evaluation are done once."""

    def __init__(self, store=None, config: GateConfig | None = None, worker=None, executor=None,
                 group: str = "main", owns_group: bool = False, build_stored: bool = False):
        self.store = store
        # called with the phase's name ("guard", "compile", "lookup", "evaluate") as each starts, so a
        # command can say what a long evaluation is doing; None: silent
        self.on_phase = None
        # True: build a kernel even when its evaluation is stored (a replay then shows that every
        # recorded kernel still builds with this nvcc); False: a stored record is used unbuilt
        self.build_stored = build_stored
        self.config = config or GateConfig()
        if executor is None:
            from klineage.exec.serial import SerialExecutor
            executor, owns_group = SerialExecutor(worker), True
        self.executor = executor
        self._group, self._owns_group = group, owns_group
        self.compile_log: list[dict] = []  # one entry per nvcc request: cached?, seconds
        self._repeats: dict[int, Gate] = {}  # round -> its gate (see repeat)

    @property
    def group(self) -> str:
        """The executor's worker group this gate's live evaluations run in."""
        return self._group

    def request(self, source: str, workload: Workload, compiled: CompileResult | None = None,
                nvcc: str | None = None) -> dict:
        """The evaluation's request (what its key is made of); the nvcc is the build's, or `nvcc`
        before any build."""
        cfg = self.config
        shapes = [{"kind": k, "shape": s} for k, s in workload.all_shapes()
                  if cfg.shapes == "all" or k == "benchmark"]
        return {
            "gate_version": GATE_VERSION,
            "kernel_hash": kernel_hash(source),
            "workload_hash": workload.content_hash,
            "shapes": shapes,
            "seeds": list(cfg.seeds),
            "timing": dict(cfg.timing),
            "arch": cfg.arch,
            "flags": list(cfg.extra_flags),
            "nvcc": compiled.nvcc_version if compiled else nvcc,
            "guard": cfg.guard,
            **({"round": cfg.round} if cfg.round != 1 else {}),
        }

    def _store_result(self, res: GateResult, request: dict, source: str, origin: str | None,
                      workload: Workload, replace: bool = False) -> None:
        if self.store is None:
            return
        self.store.put_kernel(res.kernel_hash, source, origin)
        self.store.put_workload(workload.content_hash, workload.name, workload.describe())
        result = {k: v for k, v in res.to_dict().items()
                  if k not in ("status", "kernel_hash", "workload", "eval_key", "source", "env")}
        self.store.put_evaluation({
            "eval_key": res.eval_key, "kernel_hash": res.kernel_hash, "workload_hash": workload.content_hash,
            "workload_name": workload.name, "request": request, "status": res.status.value, "result": result,
            "env": res.env or {}, "gpu": (res.env or {}).get("gpu"),
            "toolchain": {"nvcc": request.get("nvcc"), "arch": request.get("arch"),
                          "torch": (res.env or {}).get("torch"), "driver": (res.env or {}).get("driver")},
        }, replace=replace)

    def evaluate(self, source: str, workload: Workload, origin: str | None = None, replay: bool = False,
                 remeasure: bool = False) -> GateResult:
        """Guard, compile and evaluate one kernel source against the workload as the kernel declares it
        valid (Workload.for_kernel: its own domain, where it declares one). Raises NoDeviceError only
        when a live evaluation is needed and no GPU exists, ReplayMissingError when replay finds no
        record."""
        workload = workload.for_kernel(source)
        khash = kernel_hash(source)
        self._phase("guard")
        guard = check_source(source, workload)
        if self.config.guard and not guard.ok:
            req = self.request(source, workload)
            res = GateResult(Status.GUARD_REJECTED, khash, workload.name, _digest(req), "static", guard.to_dict(),
                             error_kind="static_guard", error_message=guard.summary)
            self._store_result(res, req, source, origin, workload)
            return res
        if self.store is not None and not remeasure and not self.build_stored:
            # A stored record needs no build: its request names the nvcc that made it, which is the one
            # here (or any, on replay). This keeps a replay, or a run continued from records, from
            # compiling every kernel it only looks up.
            self._phase("lookup")
            early = self._stored(source, workload, replay, khash,
                                 self.request(source, workload, nvcc=nvcc_version()), origin)
            if early is not None:
                return early
        self._phase("compile")
        compiled = self.executor.compile(source, self.config.arch, tuple(self.config.extra_flags))
        self.compile_log.append({"kernel_hash": khash, "cached": compiled.cached, "seconds": compiled.seconds,
                                 "ok": compiled.ok})
        req = self.request(source, workload, compiled)
        if not compiled.ok:
            need = arch_needs(source, self.config.arch)
            res = GateResult(Status.COMPILE_ERROR, khash, workload.name, _digest(req), "static", guard.to_dict(),
                             compile=compiled.to_dict(), error_kind=compiled.error_kind,
                             error_message=(compiled.error_message or "") + (f"; {need}" if need else ""))
            self._store_result(res, req, source, origin, workload)
            return res
        with self.executor.claim(("eval", _digest(req))):
            return self._lookup_or_measure(source, workload, origin, replay, remeasure, khash, guard, compiled, req)

    def _stored(self, source, workload, replay, khash, req, origin=None) -> GateResult | None:
        """The stored evaluation matching `req`, or None. A replay accepts a record made with another
        nvcc build (the record says which)."""
        match = {k: v for k, v in req.items() if not (replay and k == "nvcc")}
        found = [r for r in self.store.find_evaluations(kernel_hash=khash, workload_hash=workload.content_hash,
                                                        request_match=match)
                 if set(r["request"]) <= set(req)]  # not a record of another kind (e.g. a repeat round)
        if not found:
            return None
        # Every evaluation used traces back to its kernel source, replayed ones included.
        self.store.put_kernel(khash, source, origin)
        return GateResult.from_record(found[0], "replayed" if replay else "stored")

    def _lookup_or_measure(self, source, workload, origin, replay, remeasure, khash, guard, compiled, req):
        if self.store is not None and not remeasure:
            found = self._stored(source, workload, replay, khash, req, origin)
            if found is not None:
                return found
        if replay:
            raise self.replay_missing(khash, workload, req)
        self._phase("evaluate")
        payload = {"so_path": compiled.so_path, "workload_path": str(workload.path),
                   "shapes": req["shapes"], "seeds": req["seeds"], "timing": req["timing"]}
        try:
            raw = self.executor.evaluate_live(source, compiled, payload, self._group, tuple(self.config.extra_flags),
                                              stall_s=self.config.stall_s, total_s=self.config.total_s)
            env = raw.get("env")
        except NoDeviceError as exc:  # what was done before the stop goes with it (`klineage gate` shows it)
            exc.partial = exc.partial or {"kernel_hash": khash, "workload": workload.name, "guard": guard.to_dict(),
                                          "compile": compiled.to_dict()}
            raise
        status = Status(raw["status"])
        res = GateResult(status, khash, workload.name, _digest({**req, "gpu": (env or {}).get("gpu")}), "live",
                         guard.to_dict(), compile=compiled.to_dict(), correctness=raw.get("correctness", []),
                         activity=raw.get("activity"), timing=raw.get("timing", []) if status is Status.PASSED else [],
                         env=env, error_kind=raw.get("error_kind"), error_message=raw.get("error_message"),
                         wall_s=raw.get("wall_s"), phases=raw.get("phases"))
        if status is not Status.PASSED and raw.get("timing"):
            res.activity = dict(res.activity or {}, partial_timing=raw["timing"])
        self._store_result(res, req, source, origin, workload, replace=remeasure)
        return res

    def _phase(self, name: str) -> None:
        if self.on_phase is not None:
            self.on_phase(name)

    def replay_missing(self, khash: str, workload: Workload, req: dict) -> ReplayMissingError:
        """The error of a replay that finds no record of `req`, naming the fields in which the nearest
        record of the same kernel differs (timing, seeds, arch, sweep flags, round, shapes, the
        workload file); `.differs` holds them as {field: (recorded, asked)}."""
        head = f"no recorded evaluation of kernel {khash[:12]} for workload {workload.name} with this request"
        fix = "run it on a GPU machine without --replay, or import its records with `klineage evals import`"
        near = [] if self.store is None else self.store.find_evaluations(kernel_hash=khash)
        same_wl = [r for r in near if r["workload_hash"] == workload.content_hash]
        if not near:
            err = ReplayMissingError(f"{head}: no record of this kernel at all: {fix}")
            err.differs = {}
            return err
        if not same_wl:
            err = ReplayMissingError(f"{head}: this kernel is recorded only for another version of the workload "
                                     f"file ({near[0]['workload_name']}, workload hash "
                                     f"{near[0]['workload_hash'][:12]}; here {workload.content_hash[:12]}): "
                                     f"the workload changed since; {fix}")
            err.differs = {"workload": (near[0]["workload_hash"], workload.content_hash)}
            return err
        ignore = {"kernel_hash", "workload_hash", "nvcc", "gate_version"}

        def diff(rec: dict) -> dict:
            keys = (set(rec) | set(req)) - ignore
            return {k: (rec.get(k), req.get(k)) for k in sorted(keys) if rec.get(k) != req.get(k)}
        best = min((diff(r["request"]) for r in same_wl), key=len)
        parts = []
        for k, (a, b) in best.items():
            if isinstance(a, dict) and isinstance(b, dict):  # only the keys that differ
                keys = sorted(x for x in set(a) | set(b) if a.get(x) != b.get(x))
                a, b = {x: a.get(x) for x in keys}, {x: b.get(x) for x in keys}
            parts.append(f"{_FIELD_NAMES.get(k, k)}: recorded {_show(a)}, asked {_show(b)}")
        err = ReplayMissingError(f"{head}; the nearest record differs in {'; '.join(parts)}: match those "
                                 f"settings (e.g. the run configuration that recorded it), or {fix}")
        err.differs = best
        return err

    def evaluate_file(self, path: str | Path, workload: Workload, **kw) -> GateResult:
        p = Path(path)
        from klineage.errors import read_source
        return self.evaluate(read_source(p), workload, origin=str(p), **kw)

    def through(self, executor, store) -> "Gate":
        """A gate of this one's configuration whose compiles and live evaluations go through
        `executor` and whose database writes go to `store` (klineage.exec's Executor.bind)."""
        bound = Gate(store, self.config, executor=executor, build_stored=self.build_stored)
        bound.compile_log = self.compile_log
        return bound

    def with_config(self, config: GateConfig, share_worker: bool = True) -> "Gate":
        """A gate on the same store and executor with other settings; it shares this gate's worker
        group, or takes a group of its own (a fresh worker process on its first live use, closed with
        it) when `share_worker` is False (see `repeat` for timing rounds)."""
        g = Gate(self.store, config, executor=self.executor,
                 group=self._group if share_worker else self.executor.new_group(), owns_group=not share_worker,
                 build_stored=self.build_stored)
        g.compile_log = self.compile_log
        return g

    def repeat(self, round_: int) -> "Gate":
        """The gate of timing round `round_` (> 1): a worker process of its own, not this gate's, started
        on its first live use and shared by every later repeat of that round through this gate (with
        other flags too: `with_config` on it shares it). A repeat is thus never measured in the process
        that measured the original, and a process's start-up (CUDA context, the reference's first call,
        the activity profiler's set-up) is paid once per round, not once per repeat. In the reduction
        run recorded on the H200 (benchmarks/results/heldout_h200/), where every repeat started a
        process, a repeat took 12.7 s and a search evaluation 1.6 s."""
        if round_ <= 1:
            raise ValueError("a repeat is round 2 or later; round 1 is this gate")
        if round_ not in self._repeats:
            self._repeats[round_] = self.with_config(replace(self.config, round=round_), share_worker=False)
        return self._repeats[round_]

    def close(self) -> None:
        for g in self._repeats.values():
            g.close()
        self._repeats.clear()
        if self._owns_group:  # a gate that shares its group leaves the worker to the group's owner
            self.executor.release(self._group)
