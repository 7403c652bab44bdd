"""After the walks: the evidence that says *when* each step is sound and how sure its effect is.

For every accepted transition K_{i-1} -> K_i (simpler -> richer) of the library:

  round 2     both kernels timed again in a fresh worker process (a separate gate evaluation,
              keyed apart from the first), so each effect has a spread over trials *and* workers;
  probes      both kernels run on the stress probes of lineage/probe.py (correctness only);
              a probe the richer kernel fails and the simpler one passes is a precondition and
              a risk of the step;
  static      static preconditions of the richer kernel at the mechanism's lines (mechanisms/static/);
  scope       both kernels compiled for sm_80, sm_89, sm_90a, sm_100, sm_120 (lineage/scope.py);
              a richer kernel that fails where the simpler one compiles gets a hardware
              precondition citing nvcc.

Then each lifted skill goes through admission (lineage/admit.py). Every gate evaluation made here
is stored like any other and replays the same way.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from klineage import settings
from klineage.errors import InputError, ReplayMissingError
from klineage.exec.serial import SerialExecutor
from klineage.gate.gate import Gate, kernel_hash
from klineage.lineage import admit as admit_mod
from klineage.lineage import probe as probe_mod
from klineage.gate.compare import compare_timing
from klineage.workload import Workload, load_workload


@dataclass
class AnalysisConfig:
    rounds: int = 2          # timing rounds, each in a fresh worker process
    probes: bool = True
    static: bool = True
    scope: bool = True
    admission: bool = True
    # which forward rewrites admission tries: "structural" (the families' reoptimize rewrites and the
    # shape rewriters, on the mined workloads and the apply workloads; never a held-out instance) or
    # "mechanical" (the families' reoptimize rewrites on the mined workloads' kernels only)
    admission_rewrites: str = "structural"

    KEYS = ("rounds", "probes", "static", "scope", "admission", "admission_rewrites")
    ADMISSION_REWRITES = ("structural", "mechanical")


@dataclass
class Analysis:
    per_transition: dict[str, dict] = field(default_factory=dict)
    admission: dict[str, dict] = field(default_factory=dict)   # skill_id -> verdict
    evaluations: list = field(default_factory=list)
    missing: list[dict] = field(default_factory=list)


class _Recording:
    """A gate whose evaluate() also keeps every result (for the run's counts)."""

    def __init__(self, gate: Gate, sink: list):
        self._gate, self._sink = gate, sink
        self.config, self.store, self.compile_log = gate.config, gate.store, gate.compile_log

    def with_config(self, config, share_worker: bool = True):
        return _Recording(self._gate.with_config(config, share_worker), self._sink)

    def close(self) -> None:
        self._gate.close()

    def evaluate(self, *a, **kw):
        res = self._gate.evaluate(*a, **kw)
        self._sink.append(res)
        return res


def round_gate(gate: Gate, rnd: int) -> Gate:
    """A gate like `gate` for timing round `rnd`, with its own (fresh) worker."""
    return gate.with_config(replace(gate.config, round=rnd), share_worker=False)


def workload_dirs(transitions: list[dict], known: dict[str, Path]) -> dict[str, Workload]:
    out = {}
    for t in transitions:
        name = t["workload_name"]
        if name not in out:
            d = known.get(name) or settings.repo_root() / "expert_kernels" / name
            out[name] = load_workload(d)
    return out


def _probe_runner(pr, executor):
    """pr.run one kernel at a time: neighbouring steps share a kernel, and its probes run once, as in
    a serial pass (a serial executor's claim is no wait)."""
    def run(source):
        with executor.claim(("probe", pr.wl.name, kernel_hash(source))):
            return pr.run(source)
    return run


def analyze_transitions(transitions: list[dict], source_of: Callable[[str], str | None], gate: Gate,
                        workloads: dict[str, Workload], cfg: AnalysisConfig, replay: bool = False,
                        progress: Callable[..., None] | None = None, executor=None) -> Analysis:
    """The analysis of every transition; with an `executor` (klineage.exec) the transitions run as
    concurrent units and their results are merged in transition order."""
    progress = progress or (lambda *a, **k: None)
    executor = executor or SerialExecutor()
    an = Analysis()
    rec_gate = _Recording(gate, an.evaluations)
    probers = {name: probe_mod.Prober(rec_gate, wl, replay) for name, wl in workloads.items()} if cfg.probes else {}
    runners = {name: _probe_runner(pr, executor) for name, pr in probers.items()}
    extra_rounds = [_Recording(round_gate(gate, r), an.evaluations) for r in range(2, cfg.rounds + 1)]
    if cfg.static:
        from klineage.mechanisms.static import static_preconditions
    if cfg.scope:
        from klineage.lineage.scope import hardware_scope

    def one(t: dict) -> tuple[str, dict, list]:
        tid = t["transition_id"]
        missing: list[dict] = []
        wl = workloads[t["workload_name"]]
        rich, simple = source_of(t["richer_hash"]), source_of(t["simpler_hash"])
        out: dict = {"rounds": []}
        progress("analysis", step=f"{t['workload_name']}:{t['step']}", mechanism=t["mechanism"])
        for g in extra_rounds:
            got = {}
            for side, src in (("richer", rich), ("simpler", simple)):
                try:
                    got[side] = g.evaluate(src, wl, replay=replay)
                except ReplayMissingError as e:
                    missing.append({"transition_id": tid, "workload": t["workload_name"],
                                    "kernel_hash": t[f"{side}_hash"], "what": f"round {g.config.round}",
                                    "message": str(e)})
            if len(got) < 2:
                continue
            r_rich, r_simple = got["richer"], got["simpler"]
            if r_rich.passed and r_simple.passed:
                out["rounds"].append({"round": g.config.round, "effects": compare_timing(r_rich, r_simple),
                                      "eval_richer": r_rich.eval_key, "eval_simpler": r_simple.eval_key})
            else:
                out["rounds"].append({"round": g.config.round, "effects": [], "failed": True,
                                      "status_richer": r_rich.status.value, "status_simpler": r_simple.status.value})
        if cfg.probes:
            run = runners[t["workload_name"]]
            out["probe"] = probe_mod.derive(run(rich), run(simple), t["mechanism"], t["richer_hash"][:12])
        if cfg.static:
            feat = next((f for f in t["features_richer"]
                         if f["mechanism"] == t["mechanism"] and f["locus"] == t["locus"]), None)
            out["static"] = static_preconditions(rich, t["mechanism"], feat)
        if cfg.scope:
            out["scope"] = hardware_scope(simple, rich)
        return tid, out, missing

    try:
        for tid, out, missing in executor.map(one, transitions):
            an.missing += missing
            an.per_transition[tid] = out
    finally:
        for g in extra_rounds:
            g.close()
    for pr in probers.values():
        an.missing += pr.missing
    return an


def admission_workloads(root: Path | None = None) -> dict[str, tuple[Workload, list[tuple[str, str]]]]:
    """The admission targets beyond the mined workloads: {name: (workload, [(naive.cu source, origin)])}
    for every workload of the checkout's apply_workloads/ with a naive.cu (operators of their own,
    among them a linear layer and a row-wise log_softmax written as admission targets of the matrix-product
    and row-reduction families). Never a held-out instance: admission chooses which skills retrieval
    offers, and a skill admitted by its effect on a held-out instance would be chosen by the test set
    (check_not_heldout)."""
    root = Path(root or settings.repo_root())
    out: dict = {}
    apply_dir = root / "apply_workloads"
    if apply_dir.is_dir():
        for d in sorted(p.parent for p in apply_dir.glob("*/workload.py")):
            if (d / "naive.cu").is_file():
                wl = load_workload(d)
                out[wl.name] = (wl, [((d / "naive.cu").read_text(), f"apply_workloads/{d.name}/naive.cu")])
    return out


def heldout_fingerprint(root: Path | None = None) -> tuple[set[str], set[str], Path]:
    """(names, kernel hashes, folder) of the checkout's held-out instances: their workload names and
    every .cu file under heldout/."""
    held = Path(root or settings.repo_root()) / "heldout"
    names = {p.parent.name for p in held.glob("*/workload.py")}
    hashes = {kernel_hash(p.read_text()) for p in held.rglob("*.cu")}
    return names, hashes, held.resolve()


def check_not_heldout(targets: dict[str, list], root: Path | None = None) -> None:
    """Raise InputError when an admission target is a held-out instance: a workload of heldout/ (by
    folder or name) or a kernel whose source is one of heldout/'s."""
    names, hashes, held = heldout_fingerprint(root)
    for name, tgts in targets.items():
        for t in tgts:
            path = Path(t.workload.path).resolve()
            if name in names or t.workload.name in names or held in path.parents or kernel_hash(t.source) in hashes:
                raise InputError(f"admission target {name} ({t.origin}) is a held-out instance or kernel: admission "
                                 "must not see the held-out check; take targets from the expert corpus and "
                                 "apply_workloads/ only")


def run_admission(skills: list[dict], transitions: list[dict], source_of: Callable[[str], str | None],
                  gate: Gate, workloads: dict[str, Workload], an: Analysis, replay: bool = False,
                  executor=None, rewrites: str = "structural") -> None:
    """Admission verdicts for every skill card, into an.admission (with an `executor`, the skills
    run as concurrent units, merged in skill order); `rewrites` as AnalysisConfig.admission_rewrites."""
    structural = rewrites == "structural"
    executor = executor or SerialExecutor()
    rec_gate = _Recording(gate, an.evaluations)
    states: dict[str, list[tuple[str, str]]] = {}
    by_lineage: dict[str, list[dict]] = {}
    for t in transitions:
        by_lineage.setdefault(t["lineage_id"], []).append(t)
    for lid, ts in sorted(by_lineage.items()):
        ts = sorted(ts, key=lambda t: t["step"])
        wname = ts[0]["workload_name"]
        chain = [ts[-1]["simpler_hash"]] + [t["richer_hash"] for t in reversed(ts)]  # simplest first
        for h in chain:
            src = source_of(h)
            if src is not None:
                states.setdefault(wname, []).append((src, f"{wname} state {h[:12]}"))
    targets = {name: admit_mod.candidate_kernels(wl, states.get(name, [])) for name, wl in sorted(workloads.items())}
    for name, (wl, starts) in (admission_workloads() if structural else {}).items():
        targets.setdefault(name, admit_mod.candidate_kernels(wl, [], starts))
    check_not_heldout(targets)

    def one(s: dict) -> tuple[dict, list]:
        missing: list[dict] = []
        return admit_mod.admit_skill(s["card"], targets, rec_gate, replay=replay, missing=missing,
                                     structural=structural), missing

    for s, (verdict, missing) in zip(skills, executor.map(one, skills)):
        an.admission[s["skill_id"]] = verdict
        an.missing += missing
