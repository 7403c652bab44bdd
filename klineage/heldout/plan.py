"""What a held-out run would do, evaluating nothing: the --dry-run plan, and the paths a searching
condition's structural rewrites and first sweep round take from an instance's start as far as the
kernel's static facts decide them (klineage.heldout.run gates them; `cfg` is its HeldoutConfig).
"""
from __future__ import annotations

from klineage.apply.engine import next_structural, retrieved_skills
from klineage.apply.loop import ApplyConfig
from klineage.apply.materialize import tunables
from klineage.gate.compile import DEFAULT_ARCH  # the held-out instances are sm_90a builds
from klineage.gate.gate import kernel_hash
from klineage.heldout.instances import FAMILIES, Instance
from klineage.heldout.sources import foreign_library, random_seed, skill_sources


def plan(instances: list[Instance], cfg, store, llm_reason: str | None) -> dict:
    """What a run would do, evaluating nothing (--dry-run)."""
    from klineage.apply.materialize import make_buildable, sweep_space
    buildable = make_buildable(cfg.sweep_axes)
    library = store.skills()
    sources = skill_sources(store, library)
    fams = sorted({i.family for i in instances}, key=FAMILIES.index)
    return {"conditions": list(cfg.conditions), "config": cfg.to_dict(),
            "library": {"skills": len(library),
                        "foreign": {f: sorted(s["name"] for s in foreign_library(library, sources, cfg.foreign.get(f, ())))
                                    for f in fams}},
            "llm": llm_reason or "runs",
            "instances": [{"instance": i.name, "family": i.family, "starts": {k: v[0] for k, v in i.starts.items()},
                           "tunables": tunables(i.starts["idiom"][1]),
                           "sweep_space": sweep_space(i.starts["idiom"][1], buildable), "reference": i.workload.vendor_name,
                           "fallback": i.fallback_name, **_first_steps(i, cfg, library, sources)}
                          for i in instances]}


def _first_steps(inst: Instance, cfg, library: list[dict], sources: dict) -> dict:
    """The plan of one instance: each searching condition's structural rewrites (with `structural`)
    and first sweep round."""
    paths = structural_paths(inst, cfg, library, sources)
    out = {"first_sweep_round": first_sweep_round(inst, cfg, library, sources, paths=paths)}
    if cfg.structural:
        out["structural_path"] = {cond: [st["name"] for st in path] for cond, path in paths.items()}
    return out


STRUCTURAL = ("skills", "control-random", "control-foreign", "control-structural")


def structural_paths(inst: Instance, cfg, library: list[dict], sources: dict) -> dict[str, list[dict]]:
    """structural_path of every searching condition of the run ({} without `structural`)."""
    if not cfg.structural:
        return {}
    return {cond: structural_path(inst, cfg, library, sources, cond) for cond in STRUCTURAL if cond in cfg.conditions}


def structural_path(inst: Instance, cfg, library: list[dict], sources: dict, cond: str) -> list[dict]:
    """The structural rewrites a searching condition gates from its start if each is kept (what the
    run's search does when every one pays; control-structural's chain when every one passes):
    [{"name", "source"}], in order, each on the kernel the ones before it made; retrieval without a
    measured bottleneck class, as first_sweep_round."""
    from klineage.apply.materialize import RulesMaterializer
    from klineage.apply.retrieve import retrieve, target_facts
    start = "naive" if inst.family == "reduction" and "naive" in inst.starts else "idiom"
    src = inst.starts[start][1]
    if cond in ("control-random", "control-structural"):  # the same rewriters in the same seeded order
        lib, spec = [], {"mode": "random", "seed": random_seed(cfg.seed, inst.name)}
    else:
        lib, spec = (library if cond == "skills" else foreign_library(library, sources, cfg.foreign.get(inst.family, ()))), {"mode": "library"}
    acfg = ApplyConfig(materializers=("rules",), admission=cfg.admission, structural=spec)
    mat, out, tried = RulesMaterializer(structural=True), [], set()
    while True:
        key = kernel_hash(src)
        retrieval = retrieve(lib, target_facts(inst.workload, src, DEFAULT_ARCH, None), admission=cfg.admission)
        entry = next_structural(acfg, retrieval, tried, key, src, inst.workload)
        if entry is None:
            return out
        tried.add((key, "rules" + entry["skill_id"]))
        skill = entry.get("skill") or next(s for s in lib if s["skill_id"] == entry["skill_id"])
        got = mat.propose(skill, src, inst.workload)
        if got:
            src = got[0].source
            out.append({"name": entry["name"], "source": src})


def first_sweep_round(inst: Instance, cfg, library: list[dict], sources: dict,
                      rounds: int = 1, paths: dict | None = None) -> dict:
    """The points each searching condition gates first on the idiom kernel (with `structural`, on the
    kernel its structural rewrites make if each is kept: structural_path, or `paths` given), as far
    as the kernel's static facts decide them: retrieval without the start's measured bottleneck class
    (the run adds it, which can drop a skill whose precondition names one), then the steered sweep
    (with `rounds` > 1, as many rounds' points of the start's sweep order: what the steered search
    gates where no round keeps a winner); the random control's first `budget` draws, exactly (a draw
    nvcc refuses is then replaced by the next)."""
    from klineage.apply.materialize import MAX_SWEEP, make_buildable, next_points, random_points, sweep_order
    from klineage.apply.retrieve import retrieve, target_facts
    buildable = make_buildable(cfg.sweep_axes)

    def kernel(cond: str) -> str:
        if not cfg.structural:
            return inst.starts["idiom"][1]
        path = (paths or {}).get(cond)
        if path is None:
            path = structural_path(inst, cfg, library, sources, cond)
        start = "naive" if inst.family == "reduction" and "naive" in inst.starts else "idiom"
        return path[-1]["source"] if path else inst.starts[start][1]
    out = {}
    for cond in ("skills", "control-foreign"):
        if cond in cfg.conditions:
            src = kernel(cond)
            lib = library if cond == "skills" else foreign_library(library, sources, cfg.foreign.get(inst.family, ()))
            ranked = retrieved_skills(lib, retrieve(lib, target_facts(inst.workload, src, DEFAULT_ARCH, None),
                                                    admission=cfg.admission))
            out[cond] = next_points(src, sweep_order(src, ranked, buildable), rounds * (MAX_SWEEP - 1), buildable)
    if "control-random" in cfg.conditions:
        out["control-random"] = random_points(kernel("control-random"), cfg.budget, random_seed(cfg.seed, inst.name),
                                              buildable)[1:]
    if "control-structural" in cfg.conditions and cfg.structural:
        out.update(structural_control_round(inst, cfg, (paths or {}).get("control-structural")
                                            or structural_path(inst, cfg, library, sources, "control-structural")))
    return out


def structural_control_round(inst: Instance, cfg, path: list[dict]) -> dict:
    """control-structural's first sweep points on each kernel of its chain when every rewrite passes
    ({"control-structural ARM": points}): the unsteered sweep's first points, as many as the largest
    share of the budget the rewrites leave (the shares' order follows measurements)."""
    from klineage.apply.materialize import make_buildable, next_points, sweep_order
    buildable = make_buildable(cfg.sweep_axes)
    start = "naive" if inst.family == "reduction" and "naive" in inst.starts else "idiom"
    chain = [(start, inst.starts[start][1])]
    for st in path:
        chain.append((f"{chain[-1][0]}+{st['name']}", st["source"]))
    left = max(0, cfg.budget - len(path))
    share = -(-left // len(chain))
    return {f"control-structural {label}": next_points(src, sweep_order(src, [], buildable), share, buildable)
            for label, src in chain}


def prebuild_kernels(inst: Instance, cfg, library: list[dict], sources: dict) -> list[tuple[str, dict]]:
    """(source, sweep point) of every kernel a run is known to gate first on `inst`, as far as the
    kernels' static facts decide them ({} is the kernel itself): its start kernels; with `structural`,
    each searching condition's structural path (structural_path, control-structural's chain) and the
    first points its sweep gates on the path's end (the steered conditions' first two rounds, the
    random control's draws there and on the start, where its rewrites do not pay), control-structural's
    first points on every kernel of its chain and, with `idiom_arm`, each condition's first points on
    the idiom kernel; without it, each condition's first two rounds on the idiom kernel. Answering
    which points build asks nvcc's front end (sweep_axes = "buildable"), so the answers a run needs for
    them are known once this returns (klineage.gate.compile.export_front_end_answers)."""
    from klineage.apply.materialize import MAX_SWEEP, make_buildable, next_points, random_points, sweep_order
    from klineage.apply.retrieve import retrieve, target_facts
    buildable = make_buildable(cfg.sweep_axes)
    out: dict[tuple[str, tuple], tuple[str, dict]] = {}

    def add(src: str, points: list[dict]) -> None:
        for p in [{}] + list(points):
            out.setdefault((kernel_hash(src), tuple(sorted(p.items()))), (src, dict(p)))

    def steered(src: str, lib: list[dict], rounds: int) -> list[dict]:
        ranked = retrieved_skills(lib, retrieve(lib, target_facts(inst.workload, src, DEFAULT_ARCH, None),
                                                admission=cfg.admission))
        return next_points(src, sweep_order(src, ranked, buildable), rounds * (MAX_SWEEP - 1), buildable)

    seed = random_seed(cfg.seed, inst.name)
    libs = {"skills": library, "control-foreign": foreign_library(library, sources, cfg.foreign.get(inst.family, ())),
            "control-structural": []}
    for _, src in inst.starts.values():
        add(src, [])
    start = "naive" if cfg.structural and inst.family == "reduction" and "naive" in inst.starts else "idiom"
    first = inst.starts[start][1]
    paths = structural_paths(inst, cfg, library, sources)
    rounds = min(2, cfg.sweep_rounds)
    for cond in ("skills", "control-foreign", "control-random", "control-structural"):
        if cond not in cfg.conditions or (cond == "control-structural" and not cfg.structural):
            continue
        path = paths.get(cond) or []
        for st in path:
            add(st["source"], [])
        end = path[-1]["source"] if path else first
        if cond == "control-random":
            for src in dict.fromkeys([end, first]):
                add(src, random_points(src, cfg.budget, seed, buildable)[1:])
        elif cond == "control-structural":
            for arm, pts in structural_control_round(inst, cfg, path).items():
                label = arm.split(" ", 1)[1]
                src = first if label == start else path[label.count("+") - 1]["source"]
                add(src, pts)
        else:
            add(end, steered(end, libs[cond], rounds))
        if cfg.structural and cfg.idiom_arm and start != "idiom":
            idiom = inst.starts["idiom"][1]
            add(idiom, random_points(idiom, cfg.budget, seed, buildable)[1:] if cond == "control-random"
                else steered(idiom, libs[cond], 1))
    return list(out.values())
