"""The held-out report: per instance and condition, summaries per family and overall, the comparisons
of `skills` with its controls, and the memorization audit. A pure function of the stored rows, the
library and the source files: a replay that finds the same records writes the same report (nothing in
it depends on the clock, the host or whether an evaluation was live, stored or replayed).

Schema (klineage.heldout/1), top level:
  schema, run_id, root, config, definitions, environment (distinct GPU/toolchain facts of the final
  evaluations), library {skills, lineages, foreign: {family: [skill names]}},
  instances [{instance, family, dtypes, benchmark_cases, starts {kind: {path, kernel_hash}}, reference
              {used, name, reason}, conditions {condition: row}}],
  summary {families {family: {condition: aggregate}}, overall {condition: aggregate},
           comparisons [{scope, a, b, instances, ratio, ci95, verdict}], verdict,
           strict {excluded [instance], families, overall, comparisons, verdict}: the same without the
           instances whose benchmark case a library lineage measured (audit.library_overlap.cases.same_case),
           retrieval {family: {instances, same_final_kernel, points, not_in_foreign, steered}}: what the
           library changed in the search, skills against control-foreign (retrieval_effect),
           random_coverage {family: {instances, whole_space [instance]}}: where control-random gated its whole
           sweep space before its budget ran out (random_coverage),
           budget_curves {scope: {condition: [geomean best search speedup after n = 0 .. budget candidates]}}
           (budget_curves; each searching row carries its own budget_curve),
           published {published, ours, families, ratio_to_published, comparable, why_not_comparable}:
           idiom and skills beside the published check's figures (against_published),
           window_check {shapes, threshold, suspect [...]}: final measurements whose host-side dispatch
           outlasted the spin queued before the window (window_check; only with host times recorded)},
  audit {library_overlap {clean, queries [{check, sql, params, rows}], cases {...}},
         similarity {method, experts, kernels, per_kernel [...], top_pairs [...]},
         skills_used [{instance, condition, skills [{skill, skill_id, uses, kept, mined_from}]}]},
  missing [{instance, condition, reason}], not_run [{instance, condition, reason}]
A row: status PASSED | FAILED | NOT_RUN | MISSING, reason, reference, speedup, ci95, df, log_var,
n_trials, latency_us, reference_us, per_shape [{shape, speedup, ci95, n, trial_ratios, latency_us,
reference_us, gate_speedups}], correctness {seeds, shapes, rounds [...]}, kernel_hash, produced_hash,
flags, final_eval_keys, arms [...], evaluations_used, budget, library, skills_used, env, budget_curve
(searching conditions: the best search speedup after n = 0 .. budget gated candidates, None before one passed).
An aggregate: instances, passed, failed, not_counted, geomean (failures counted), geomean_success_only,
at_or_above_reference, above_reference_beyond_noise.
"""
from __future__ import annotations

import json
from pathlib import Path

from klineage import settings
from klineage.apply.retrieve import workload_facts
from klineage.gate.gate import kernel_hash
from klineage.heldout import similarity, stats
from klineage.heldout.instances import FAMILIES, Instance, fallback_hash
from klineage.heldout.sources import foreign_library, produced_source
from klineage.workload import ALIAS_KEY, OFFSET_KEY

SCHEMA = "klineage.heldout/1"
CONTROLS = ("control-random", "control-foreign", "control-structural")
TOP_PAIRS = 15
# The published check on the same 22 instances (shared/reference/klineage-paper.md, "Their 22-instance
# held-out check"): geomeans against FlagGems and instances at or above it, idiom-only and with the
# skill cards' configuration steering a 5-7 point sweep; reductions stayed near 0.96x.
PUBLISHED = {"source": "KLineage paper, 22-instance held-out check (shared/reference/klineage-paper.md)",
             "instances": 22, "geomean": {"idiom": 1.07, "skills": 1.12},
             "at_or_above_reference": {"idiom": 14, "skills": 16},
             "families": {"reduction": {"skills": 0.96}},
             "note": "their figures are as published: one run, no intervals, and their summary does not say how "
                     "failures were counted or on which GPU the check ran"}


def definitions(cfg) -> dict:
    return {
        "speedup": "reference time / kernel time. Per benchmark shape: the geometric mean of the paired trial ratios "
                   "(reference trial median / kernel trial median; in each timing trial the gate alternates the two "
                   "call by call in the same worker) over every trial of the final rounds; per instance the geometric "
                   "mean over its benchmark shapes.",
        "ci95": f"Student t interval of the log trial ratios: over {cfg.final_rounds} final rounds (each a worker process "
                f"of its own) x {cfg.to_dict()['timing']['trials']} trials per benchmark shape. It is timing noise only, "
                "not variation over instances.",
        "correctness": "each final round checks every benchmark and probe shape at the gate's seeds (GateConfig.seeds); "
                       "a row is PASSED only when every final round passed every shape and seed.",
        "failures": f"a condition that produced no correct kernel, or whose final kernel failed a final round, is FAILED "
                    f"and counts in geomeans at {cfg.failure_speedup}x (not dropped); geomean_success_only leaves failures "
                    "out, for comparison with success-only figures. NOT_RUN and MISSING rows are not counted and are listed.",
        "budget": f"at most {cfg.budget} candidate kernels gated per instance and condition (summed over arms); the start "
                  "kernel's evaluation, the round-2 re-measure of a faster candidate and the check of a baked sweep "
                  "winner are not counted (every condition gets them alike), nor is a sweep point nvcc refused (a "
                  "configuration the kernel's own static checks reject: recorded, and the next point or draw takes "
                  "its place); the final rounds are the measurement.",
        "control-random": "sweep of the idiom kernel over points drawn at random, seeded per instance (sha256 of seed and "
                          "instance name), from the sweep's own axes: each axis's default and neighbours; no library.",
        "control-foreign": "the skills procedure with the library cut to skills whose every source workload has a family "
                           f"in the instance family's foreign list: {json.dumps(cfg.foreign, sort_keys=True)}.",
        "beyond_noise": "A against B on a set of instances: the geometric mean of A's speedup over B's, with a 95% interval "
                        "from both rows' timing variances (t with the smallest df); 'faster beyond the timing noise' when "
                        "the whole interval is above 1. Rows with the same final measurement differ by exactly 0.",
        "at_or_above_reference": "PASSED rows with speedup >= 1.0 (above_reference_beyond_noise: ci95 entirely above 1).",
        "budget_curve": "per searching condition and instance, entry n: the highest speedup over the reference the "
                        "search had measured (its own round-1 evaluations: geomean over benchmark shapes) among the "
                        "kernels that passed the gate after n gated candidates, the arms' start kernels included "
                        "(they cost no candidate); read from the recorded trajectory, no extra evaluation. Per "
                        "family and overall (summary.budget_curves): the geomean over instances, an instance with no "
                        f"passing kernel yet counted at {cfg.failure_speedup}x. The idiom condition searches nothing.",
        **({"control-structural": "the same structural rewriters as control-random, in its seeded order and at their own "
                                  "parameters, each rewrite that passes the gate kept (faster or not) and the next "
                                  "written on it; every kernel of that chain (its start too) is then an arm swept on "
                                  "its own axes by the unsteered sweep (the sweep's own order, no card), the budget the "
                                  "rewrites left split evenly over the arms, the fastest first; no card is read."}
           if "control-structural" in cfg.conditions else {}),
        **({"idiom_arm": "a reduction searched from its naive start keeps its idiom kernel as an arm, swept as the "
                         "condition sweeps with the budget the arms before it left (at least its start evaluation)."}
           if cfg.to_dict().get("idiom_arm") else {}),
    }


def summarize(rows: list[dict], cfg, shared: set[str] = frozenset()) -> dict:
    """Aggregates per family and overall, skills against the others, the verdict; and the same
    without the instances in `shared` (those whose benchmark case a library lineage measured too:
    the audit's same cases), under "strict"."""
    out = _aggregates(rows, cfg)
    fams = list(out["families"])
    out["verdict"] = _verdict(out["comparisons"], fams, list(cfg.conditions))
    kept = [r for r in rows if r["instance"] not in shared]
    strict = _aggregates(kept, cfg) if kept else {"families": {}, "overall": {}, "comparisons": []}
    out["strict"] = {"excluded": sorted(shared), **strict,
                     "verdict": _verdict(strict["comparisons"], list(strict["families"]), list(cfg.conditions))}
    out["retrieval"] = retrieval_effect(rows)
    out["random_coverage"] = random_coverage(rows)
    out["budget_curves"] = budget_curves(rows, cfg)
    out["published"] = against_published(out)
    window = window_check(rows)
    if window is not None:
        out["window_check"] = window
    return out


WINDOW_SUSPECT = 0.05  # a shape whose reference (or kernel) outlasted its spin on more than 5% of timed calls


def window_check(rows: list[dict]) -> dict | None:
    """Whether any host-side dispatch could have put idle GPU time in a timed window: the final
    measurements' shapes where a side took longer to dispatch than the spin queued before it on more
    than WINDOW_SUSPECT of the timed calls. None when no row's records hold host times."""
    shapes, suspect = 0, []
    for r in rows:
        for p in r.get("per_shape") or []:
            h = p.get("host_dispatch")
            if not h or "over_backlog" not in h:
                continue
            shapes += 1
            for side, n in h["over_backlog"].items():
                if n > WINDOW_SUSPECT * h["timed_calls"]:
                    suspect.append({"instance": r["instance"], "condition": r["condition"], "shape": p["shape"],
                                    "side": side, "over_backlog": n, "timed_calls": h["timed_calls"],
                                    "host_median_us": h["median_us"][side], "backlog_us": h["backlog_us"][side]})
    if not shapes:
        return None
    return {"shapes": shapes, "threshold": WINDOW_SUSPECT, "suspect": suspect}


def against_published(summary: dict) -> dict:
    """This run's idiom and skills geomeans (failures counted, and passed only) and instances at or
    above the reference beside the published check's; `comparable` only when all 22 instances were
    counted in both conditions."""
    ours, ratio = {}, {}
    for c in ("idiom", "skills"):
        a = (summary.get("overall") or {}).get(c)
        if not a:
            continue
        ours[c] = {"instances": a["passed"] + a["failed"], "geomean": a["geomean"],
                   "geomean_success_only": a["geomean_success_only"], "at_or_above_reference": a["at_or_above_reference"]}
        if a["geomean"] is not None:
            ratio[c] = a["geomean"] / PUBLISHED["geomean"][c]
    fams = {f: {c: agg[c]["geomean"] for c in ("idiom", "skills") if c in agg}
            for f, agg in (summary.get("families") or {}).items()}
    comparable = bool(ours) and all(o["instances"] == PUBLISHED["instances"] for o in ours.values())
    counted = ", ".join(f"{c}: {o['instances']}" for c, o in ours.items()) or "no condition"
    return {"published": PUBLISHED, "ours": ours, "families": fams, "ratio_to_published": ratio,
            "comparable": comparable,
            "why_not_comparable": None if comparable else
            f"this run counted {counted} of the {PUBLISHED['instances']} instances"}


def budget_curves(rows: list[dict], cfg) -> dict:
    """{scope: {condition: [geomean over instances of budget_curve[n] for n = 0 .. budget]}} per family and
    overall, over the PASSED and FAILED rows of the searching conditions (an entry with no passing kernel
    yet, a failed search's, counts at cfg.failure_speedup). Rows recorded without a curve are left out."""
    out: dict[str, dict] = {}
    fams = sorted({r["family"] for r in rows}, key=lambda f: FAMILIES.index(f) if f in FAMILIES else 99)
    for scope in fams + ["overall"]:
        per: dict[str, list] = {}
        for c in cfg.conditions:
            curves = [r["budget_curve"] for r in rows if r["condition"] == c and r.get("budget_curve") is not None
                      and r["status"] in ("PASSED", "FAILED") and scope in (r["family"], "overall")]
            if curves:
                per[c] = [stats.geo([cv[n] if cv[n] is not None else cfg.failure_speedup for cv in curves])
                          for n in range(len(curves[0]))]
        if per:
            out[scope] = per
    return out


def _sweep_steps(row: dict):
    """(arm, step) of every sweep point a row's arms gated."""
    return [(a, st) for a in row.get("arms") or [] for st in a.get("steps") or [] if st.get("backend") == "sweep"]


def _sweep_points(row: dict) -> set[tuple]:
    """(arm start, sorted configuration) of every sweep point a row's arms gated."""
    return {(a.get("start"), tuple(sorted((st.get("config") or {}).items()))) for a, st in _sweep_steps(row)}


def random_coverage(rows: list[dict]) -> dict:
    """Per family, the instances where control-random ran out of configurations before its budget:
    it gated its kernel's whole sweep space (each point built and timed, or refused by nvcc), so it
    found the best configuration there is in it and no steering of the same space can beat it."""
    out: dict[str, dict] = {}
    for r in rows:
        if r["condition"] != "control-random" or r["status"] not in ("PASSED", "FAILED"):
            continue
        agg = out.setdefault(r["family"], {"instances": 0, "whole_space": []})
        agg["instances"] += 1
        if any(a.get("stop_reason") == "no_candidates" and a.get("evaluated") for a in r.get("arms") or []):
            agg["whole_space"].append(r["instance"])
    return out


def retrieval_effect(rows: list[dict]) -> dict:
    """What the library changed in the search, per family: skills against control-foreign (the same
    procedure with the library cut to foreign skills). `points` counts the sweep points skills gated,
    `not_in_foreign` those control-foreign did not gate on the same instance and start (the points the
    instance family's own skills put there), `steered` those whose value some retrieved card names
    (which may also be one of the sweep's own neighbours), `same_final_kernel` the instances where both
    conditions ended on the same kernel and flags. Instances without both rows PASSED or FAILED are left out."""
    by = {(r["instance"], r["condition"]): r for r in rows}
    out: dict[str, dict] = {}
    for (inst, cond), r in sorted(by.items()):
        f = by.get((inst, "control-foreign"))
        if cond != "skills" or f is None or {r["status"], f["status"]} - {"PASSED", "FAILED"}:
            continue
        mine, theirs = _sweep_points(r), _sweep_points(f)
        steered = sum(1 for _, st in _sweep_steps(r) if st.get("steered_by"))
        agg = out.setdefault(r["family"], {"instances": 0, "same_final_kernel": 0, "points": 0, "not_in_foreign": 0,
                                           "steered": 0})
        agg["instances"] += 1
        agg["same_final_kernel"] += int((r.get("kernel_hash"), r.get("flags")) == (f.get("kernel_hash"), f.get("flags"))
                                        and r.get("kernel_hash") is not None)
        agg["points"] += len(mine)
        agg["not_in_foreign"] += len(mine - theirs)
        agg["steered"] += steered
    return out


def _aggregates(rows: list[dict], cfg) -> dict:
    conds = list(cfg.conditions)
    fams = sorted({r["family"] for r in rows}, key=lambda f: FAMILIES.index(f) if f in FAMILIES else 99)
    scopes = [(f, [r for r in rows if r["family"] == f]) for f in fams] + [("overall", rows)]
    out = {"families": {}, "overall": {}, "comparisons": []}
    for scope, rs in scopes:
        agg = {c: stats.aggregate([r for r in rs if r["condition"] == c], cfg.failure_speedup) for c in conds}
        if scope == "overall":
            out["overall"] = agg
        else:
            out["families"][scope] = agg
        if "skills" in conds:
            a = [r for r in rs if r["condition"] == "skills"]
            for b in [*CONTROLS, "idiom", "llm"]:
                if b in conds:
                    cmp = stats.compare(a, [r for r in rs if r["condition"] == b], cfg.failure_speedup)
                    if cmp:
                        out["comparisons"].append({"scope": scope, "a": "skills", "b": b, **cmp})
    return out


def _verdict(comps: list[dict], fams: list[str], conds: list[str]) -> str:
    if "skills" not in conds or not any(c in conds for c in CONTROLS):
        return "skills and a control were not both run: no comparison"
    ctrls = [c for c in CONTROLS if c in conds]
    faster = {(c["scope"], c["b"]) for c in comps if c["verdict"] == "faster beyond the timing noise"}
    both = [f for f in fams if all((f, b) in faster for b in ctrls)]
    parts = []
    if both:
        parts.append(f"skills is faster than {' and '.join(ctrls)} beyond the timing noise on: {', '.join(both)}.")
    else:
        parts.append(f"skills does not beat {' and '.join(ctrls)} beyond the timing noise on any family.")
    for b in ctrls:
        fs = [f for f in fams if (f, b) in faster]
        slower = [c["scope"] for c in comps if c["b"] == b and c["scope"] != "overall"
                  and c["verdict"] == "slower beyond the timing noise"]
        parts.append(f"Against {b}: faster beyond noise on {', '.join(fs) or 'no family'}"
                     + (f"; slower beyond noise on {', '.join(slower)}" if slower else "") + ".")
    return " ".join(parts)


# -- the memorization audit ----------------------------------------------------------------------------

def _dims(shape: dict) -> list[int]:
    return sorted(v for k, v in shape.items() if k not in (OFFSET_KEY, ALIAS_KEY))


def case_audit(store, instances: list[Instance]) -> dict:
    """Held-out benchmark cases against every case a library lineage measured. A case is the same
    when operator family, dtypes and the multiset of sizes all agree; equal sizes of another
    operator or dtype are listed apart, as coincidences."""
    lib = store.lineage_cases()
    same, dims_only = [], []
    for inst in instances:
        for shape in inst.workload.benchmark_cases:
            d = _dims(shape)
            for c in lib:
                if _dims(c["shape"]) != d:
                    continue
                fam, dts = workload_facts(c["workload"])
                entry = {"instance": inst.name, "shape": shape, "library_workload": c["workload"],
                         "library_shape": c["shape"], "library_family": fam, "library_dtypes": list(dts)}
                (same if fam == inst.family and set(dts) == set(inst.workload.dtypes) else dims_only).append(entry)
    return {"rule": "same case = same operator family, same dtypes and the same sizes (as a multiset)",
            "library_cases": len(lib), "heldout_cases": sum(len(i.workload.benchmark_cases) for i in instances),
            "same_case": same, "same_sizes_other_operator": dims_only}


def overlap_audit(store, instances: list[Instance], rows: list[dict], root: Path) -> dict:
    names = sorted(i.name for i in instances)
    whashes = sorted({i.workload.content_hash for i in instances}
                     | {fallback_hash(i.workload.content_hash) for i in instances if i.has_fallback})
    khashes = sorted({kernel_hash(src) for i in instances for _, src in i.starts.values()}
                     | {r[k] for r in rows for k in ("kernel_hash", "produced_hash") if r.get(k)})
    prefixes = sorted({settings.display_path(root).rstrip("/") + "/", str(Path(root).resolve()) + "/"})
    queries = store.library_overlap(names, whashes, khashes, prefixes)
    # the report is the same from every checkout: the checkout's absolute path is shown as <checkout>
    top = str(settings.repo_root().resolve())
    for q in queries:
        q["params"] = [f"<checkout>{p[len(top):]}" if isinstance(p, str) and p.startswith(top + "/") else p
                       for p in q["params"]]
    cases = case_audit(store, instances)
    return {"clean": all(not q["rows"] for q in queries) and not cases["same_case"], "queries": queries, "cases": cases}


def similarity_audit(store, rows: list[dict], corpus: dict | None = None, top: int = TOP_PAIRS) -> dict:
    """Every produced kernel (the final kernel of every row, as it ran) against every expert source
    file of `corpus` (klineage.heldout.records.expert_corpus: the expert corpus as it is now, or as a
    recorded run's library record keeps it): the best match per kernel and the highest pairs overall."""
    from klineage.heldout.records import expert_corpus
    corpus = corpus or expert_corpus()
    experts = {path: similarity.fingerprints(src) for path, src in sorted(corpus["files"].items())}
    produced: dict[str, dict] = {}
    for r in rows:
        if not r.get("kernel_hash"):
            continue
        k = store.get_kernel(r["kernel_hash"])
        if k is None:
            continue
        src = produced_source(k["source"], r.get("flags"))
        p = produced.setdefault(r["produced_hash"], {"source": src, "used_by": []})
        p["used_by"].append(f"{r['instance']}/{r['condition']}")
    per_kernel, pairs = [], []
    for h, p in sorted(produced.items()):
        fp = similarity.fingerprints(p["source"])
        scored = sorted(((similarity.score(fp, e), path) for path, e in experts.items()),
                        key=lambda x: (-x[0].jaccard, -x[0].containment, x[1]))
        for sc, path in scored[:top]:
            pairs.append({"kernel": h[:12], "used_by": sorted(p["used_by"]), "expert": path,
                          "jaccard": round(sc.jaccard, 4), "containment": round(sc.containment, 4), "shared": sc.shared})
        best_sc, best_path = scored[0] if scored else (similarity.Score(0.0, 0.0, 0), None)
        per_kernel.append({"kernel": h[:12], "used_by": sorted(p["used_by"]), "fingerprints": len(fp),
                           "best_expert": best_path, "jaccard": round(best_sc.jaccard, 4),
                           "containment": round(best_sc.containment, 4)})
    pairs.sort(key=lambda x: (-x["jaccard"], -x["containment"], x["kernel"], x["expert"]))
    return {"method": similarity.METHOD, "expert_root": corpus["root"], "experts": len(experts),
            "kernels": len(produced), "per_kernel": per_kernel, "top_pairs": pairs[:top]}


def _library_notes(foreign: dict[str, list[str]], n: int, cfg) -> list[str]:
    """What the foreign map makes of this library, where it makes a control degenerate."""
    if "control-foreign" not in cfg.conditions:
        return []
    notes = []
    for fam, names in foreign.items():
        if not names:
            notes.append(f"no skill of the library is foreign to {fam}: its control-foreign ran without skills "
                         "(an unsteered sweep, no rules)")
        elif len(names) == n:
            notes.append(f"every skill of the library ({n}) is foreign to {fam}: its control-foreign retrieves from the "
                         "same library as skills, so the two coincide there")
    return notes


# -- the whole report --------------------------------------------------------------------------------

def build_report(store, run_id: str, root: Path, cfg, instances: list[Instance], rows: list[dict],
                 library: list[dict], sources: dict, corpus: dict | None = None) -> dict:
    by = {(r["instance"], r["condition"]): r for r in rows}
    insts = []
    for inst in instances:
        conds = {c: by[(inst.name, c)] for c in cfg.conditions if (inst.name, c) in by}
        insts.append({
            "instance": inst.name, "family": inst.family, "dtypes": list(inst.workload.dtypes),
            "benchmark_cases": [dict(s) for s in inst.workload.benchmark_cases],
            "starts": {k: {"path": rel, "kernel_hash": kernel_hash(src)} for k, (rel, src) in sorted(inst.starts.items())},
            "reference": next((r["reference"] for r in conds.values() if r.get("reference")), None),
            "conditions": conds})
    overlap = overlap_audit(store, instances, rows, root)
    shared = {c["instance"] for c in overlap["cases"]["same_case"]}
    envs = {json.dumps(r["env"], sort_keys=True) for r in rows if r.get("env")}
    fams = sorted({i.family for i in instances}, key=FAMILIES.index)
    foreign = {f: sorted(s["name"] for s in foreign_library(library, sources, cfg.foreign.get(f, ()))) for f in fams}
    return {
        "schema": SCHEMA, "run_id": run_id, "root": settings.display_path(root), "config": cfg.to_dict(),
        "definitions": definitions(cfg),
        "environment": [json.loads(e) for e in sorted(envs)],
        "library": {"hash": store.library_hash(), "skills": len(library), "lineages": len(store.lineages()),
                    "foreign": foreign,
                    "notes": _library_notes(foreign, len(library), cfg)},
        "instances": insts,
        "summary": summarize(rows, cfg, shared),
        "audit": {"library_overlap": overlap,
                  "similarity": similarity_audit(store, rows, corpus),
                  "skills_used": [{"instance": r["instance"], "condition": r["condition"], "skills": r["skills_used"]}
                                  for r in rows if r.get("skills_used")]},
        "missing": [{"instance": r["instance"], "condition": r["condition"], "reason": r["reason"]}
                    for r in rows if r["status"] == "MISSING"],
        "not_run": [{"instance": r["instance"], "condition": r["condition"], "reason": r["reason"]}
                    for r in rows if r["status"] == "NOT_RUN"],
    }
