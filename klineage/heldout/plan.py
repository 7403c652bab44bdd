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


def structural_paths(inst: Instance, cfg, library: list[dict], sources: dict) -> dict[str, list[dict]]:
    """structural_path of every searching condition of the run ({} without `structural`)."""
    if not cfg.structural:
        return {}
    return {cond: structural_path(inst, cfg, library, sources, cond)
            for cond in ("skills", "control-random", "control-foreign") if cond in cfg.conditions}


def structural_path(inst: Instance, cfg, library: list[dict], sources: dict, cond: str) -> list[dict]:
    """The structural rewrites a searching condition gates from its start if each is kept (what the
    run's search does when every one pays): [{"name", "source"}], in order, each on the kernel the ones
    before it made; retrieval without a measured bottleneck class, as first_sweep_round."""
    from klineage.apply.materialize import RulesMaterializer
    from klineage.apply.retrieve import retrieve, target_facts
    start = "naive" if inst.family == "reduction" and "naive" in inst.starts else "idiom"
    src = inst.starts[start][1]
    if cond == "control-random":
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
    return out
