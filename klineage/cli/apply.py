"""The apply group (apply, apply list|show) and the baseline group: skills applied to a new kernel."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import click

from klineage.cli.common import (DbTarget, arch_option, bad_input, clip, counts_text, db_option, echo_preview,
                                 json_option, library_errors, main, reads_library, make_llm, open_db)
from klineage.errors import ExitCode, read_source
from klineage.report.text import table


@main.group("apply", invoke_without_command=True)
@click.option("-w", "--workload", "workload_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Workload folder of the new kernel (its workload.py).")
@click.option("-s", "--start", "start_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="The starting kernel (.cu) to make faster.")
@db_option(mode="extend")
@click.option("--materializer", "materializers", multiple=True, type=click.Choice(["rules", "sweep", "llm"]),
              help="Backends to use, in order (repeat the option; default: rules and sweep).")
@click.option("--budget-steps", type=int, default=16, show_default=True, help="Gate evaluations of candidates at most.")
@click.option("--budget-usd", type=float, default=None, help="Dollars of model calls at most (llm).")
@click.option("--budget-s", type=float, default=None, help="Wall-clock seconds at most.")
@click.option("--admission", type=click.Choice(["first", "on", "off"]), default="first", show_default=True,
              help="first: every skill that fits, the admitted ones (their roundtrip trials passed) ranked before "
                   "the rest; on: admitted skills only; off: admission ignored (docs/apply.md).")
@click.option("--sweep-axes", type=click.Choice(["source", "buildable"]), default="source", show_default=True,
              help="How the sweep counts its grid when it picks its axes: every configuration, or only those "
                   "nvcc's front end accepts (the kernel's static checks; needs nvcc), which the sweep then "
                   "proposes alone.")
@click.option("--structural", type=click.Choice(["library", "off"]), default="library", show_default=True,
              help="Structural skills (a shape rewriter's: a warp or block per row, shuffles, online softmax, "
                   "tiling ...) in the rules backend, the retrieved ones first, one per step before any sweep "
                   "point; off: only what a mechanism family's reoptimize writes.")
@click.option("--model", default=None, help="Model id for --materializer llm (default claude-sonnet-4-5).")
@click.option("--base-url", default=None, help="An OpenAI-compatible server for --materializer llm (e.g. a local one).")
@click.option("-n", "--dry-run", is_flag=True,
              help="Build and gate nothing, touch no GPU: print the retrieved skills and each backend's first "
                   "candidate (with llm: the exact prompt for the top skill and its cost estimate; sends nothing).")
@click.option("--replay", is_flag=True, help="Use recorded evaluations instead of a GPU.")
@arch_option
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write best.cu and trajectory.json here.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@json_option
@click.pass_context
@library_errors
def apply_cmd(ctx, workload_dir, start_path, db_path, materializers, budget_steps, budget_usd, budget_s, admission,
              sweep_axes, structural, model, base_url, dry_run, replay, arch, out_dir, quiet, as_json):
    """Retrieve skills for a new kernel and apply them one at a time behind the gate.

    \b
    klineage apply --workload DIR --start KERNEL.cu [--materializer rules|sweep|llm ...] [--out DIR]
    klineage apply show RUN        replay a stored trajectory

    Exits 1 when the start kernel fails the gate, 4 when a replay lacks records.
    """
    if ctx.invoked_subcommand is not None:
        return
    if workload_dir is None or start_path is None:
        raise click.UsageError("give --workload DIR and --start KERNEL.cu (or: klineage apply show RUN)")
    from klineage.apply.loop import ApplyConfig, write_outputs
    from klineage.gate.compile import DEFAULT_ARCH
    from klineage.gate.gate import GateConfig
    from klineage.workload import load_workload

    if dry_run:  # reads the library only
        db_path = DbTarget(db_path.path, "read")
    store = open_db(db_path)  # first: a mistyped --db fails before anything is loaded or built
    try:
        wl = load_workload(workload_dir)
        start = read_source(start_path)
        mats = tuple(materializers) or ("rules", "sweep")
        cfg = ApplyConfig(materializers=mats, budget_steps=budget_steps, budget_usd=budget_usd, budget_s=budget_s,
                          admission=admission, model=model, sweep_axes=sweep_axes,
                          structural={"mode": "library"} if structural == "library" else None,
                          arch=arch or DEFAULT_ARCH)
        llm = make_llm(mats, model, base_url, budget_usd, dry_run)
        gate_config = None if arch is None else GateConfig(arch=arch)
        check_start_compiles(start, str(start_path), arch or DEFAULT_ARCH)
        if dry_run:
            plan = apply_plan(store.skills(), wl, start, cfg, llm, arch or DEFAULT_ARCH)
            click.echo(json.dumps(plan, indent=1, default=str) if as_json else format_apply_plan(plan))
            return
        run = execute_apply(store, wl, start, str(start_path), cfg, llm, replay, gate_config, quiet=quiet or as_json)
    finally:
        store.close()
    if out_dir:
        write_outputs(run, out_dir)
    if as_json:
        click.echo(json.dumps({k: v for k, v in run.items() if k != "best_source"}, indent=1, default=str))
    else:
        click.echo(format_apply_run(run))
    sys.exit(_apply_exit(run))


def check_start_compiles(start: str, path: str, arch: str) -> None:
    """Exit 1 with nvcc's messages, naming PATH, when the start kernel does not compile for `arch`
    (its PTX, built on the CPU and cached: the same compile `klineage features` runs); nothing is
    stored. Without nvcc the gate says so later."""
    from klineage.gate.compile import compile_ptx, compiler_messages, named
    built = compile_ptx(start, arch)
    if built.ok or built.error_kind == "no_nvcc":
        return
    said = "\n".join(f"  {named(m, path)}" for m in compiler_messages(built.log)) or f"  {named(built.error_message, path)}"
    err = click.ClickException(f"the start kernel {path} does not compile for {arch} "
                               f"({built.error_kind}); nvcc says:\n{said}\nfix it, then run again")
    err.exit_code = int(ExitCode.FAILED)
    raise err


def start_error(store, run: dict, path: str) -> list[str]:
    """Why the start kernel failed the gate, in the lines a person reads: the verdict with its reason,
    and for a build that failed nvcc's messages, naming PATH."""
    from klineage.gate.compile import compiler_messages, named
    st = next((s for s in run.get("steps", []) if s["kind"] == "start"), None)
    if st is None:
        return []
    lines = [named(st.get("error") or st["status"], path)]
    rec = store.get_evaluation(st["eval_key"]) if st.get("eval_key") else None
    log = (((rec or {}).get("result") or {}).get("compile") or {}).get("log", "")
    if st["status"] == "COMPILE_ERROR" and log:
        lines += [f"  {named(m, path)}" for m in compiler_messages(log)]
    return lines


def _apply_exit(run: dict) -> int:
    """A run whose start kernel failed the gate failed (1); a replay that lacked records exits 4."""
    if run["stop_reason"] == "start_failed":
        return int(ExitCode.FAILED)
    return int(ExitCode.MISSING) if (run.get("summary") or {}).get("missing") else int(ExitCode.OK)


BOTTLENECKS = ("memory", "compute", "latency")


def apply_plan(skills: list[dict], wl, start: str, cfg, llm, arch: str) -> dict:
    """What `apply` would do first, with nothing gated and no GPU touched: the skills retrieved for
    the start kernel (its bottleneck unknown until it is measured), the excluded ones with their
    reasons; the candidate the live run gates first (klineage.apply.loop.plan_first: the search
    engine's own rounds, structural rewrites included as the configuration has them), and which one
    it is for each bottleneck class the start's measurement can give; the sweep axes of the start and
    those the first candidate's rewrite brings (its tunables); per backend its first candidate: the
    rules', the sweep's first round of points, the llm's exact prompt for the top retrieved skill."""
    from dataclasses import replace

    from klineage.apply.engine import retrieved_skills
    from klineage.apply.loop import plan_first
    from klineage.apply.materialize import contract_text, make_buildable, make_sweep, sweep_space
    from klineage.apply.retrieve import retrieve, target_facts
    if not skills:
        raise bad_input("the library is empty: pass --db with a copy of skills_db/skills.duckdb, or mine first")
    facts = target_facts(wl, start, cfg.arch, None)
    got = retrieve(skills, facts, admission=cfg.admission)
    by_id = {s["skill_id"]: s for s in skills}
    plan = {"dry_run": True, "workload": wl.name, "materializers": list(cfg.materializers),
            "budget_steps": cfg.budget_steps, "arch": arch, "target": got["target"],
            "structural": cfg.structural is not None,
            "retrieved": [{"name": c["name"], "skill_id": c["skill_id"], "score": c["terms"]["score"]}
                          for c in got["candidates"]],
            "excluded": [{"name": e["name"], "reasons": e["reasons"]} for e in got["excluded"]],
            "admission": got["admission"], "first": {}}
    for c, row in zip(got["candidates"], plan["retrieved"]):
        row["admission"] = c["admission"]
    memo: dict = {}

    def brief(p: dict) -> dict:
        return {k: p.get(k) for k in ("backend", "skill", "note", "flags", "kernel_hash", "stop")}
    first = plan_first(skills, wl, start, cfg, arch, llm=llm, memo=memo)
    plan["first_candidate"] = {**brief(first), "config": first.get("config"), "passed_over": first["passed_over"]}
    plan["first_candidate_by_bottleneck"] = {
        cls: brief(plan_first(skills, wl, start, cfg, arch, bottleneck={"class": cls}, llm=llm, memo=memo))
        for cls in BOTTLENECKS}
    buildable = make_buildable(cfg.sweep_axes, arch)
    plan["sweep_axes"] = {"start": sweep_space(start, buildable)}
    if first.get("source") and first["backend"] == "rules":
        plan["sweep_axes"]["after_first"] = sweep_space(first["source"], buildable)
    for backend in cfg.materializers:
        if backend == "rules":
            rules = first if first["backend"] == "rules" else plan_first(
                skills, wl, start, replace(cfg, materializers=("rules",)), arch, memo=memo)
            plan["first"]["rules"] = ({"skill": rules["skill"], "note": rules["note"]} if rules["backend"] else
                                      {"skill": None, "note": "no retrieved skill has a rewrite that applies"})
        elif backend == "sweep":
            sweep = make_sweep(cfg.sweep, buildable)
            pts = sweep.propose_all(retrieved_skills(skills, got), start, wl)
            plan["first"]["sweep"] = {"points": [c.config for c in pts]}
        elif backend == "llm":
            top = by_id[got["candidates"][0]["skill_id"]] if got["candidates"] else None
            if top is None:
                plan["first"]["llm"] = {"skill": None, "note": "no skill retrieved: nothing to prompt with"}
            else:
                prev = llm.dry_run([top["card_md"]], start, contract_text(wl), None)
                plan["first"]["llm"] = {"skill": top["name"]}
                plan["prompt"], plan["estimate"] = prev["prompt"], prev["estimate"]
    return plan


def _axes_text(space: dict) -> str:
    return "; ".join(f"{k} ({v[0]}: {', '.join(map(str, v[1:]))})" for k, v in space.items()) or "none"


def format_apply_plan(plan: dict) -> str:
    from klineage.report.text import shorten, wrapped
    lines = [f"dry run on {plan['workload']} ({plan['arch']}): nothing is gated and no GPU touched; the start kernel's "
             f"bottleneck is unknown until it is measured"]
    lines.append(table(["rank", "retrieved skill", "score", "admission"],
                       [[i + 1, c["name"], f"{c['score']:.2f}", c.get("admission", "-")]
                        for i, c in enumerate(plan["retrieved"])],
                       right=("rank", "score")) if plan["retrieved"] else "no skill retrieved")
    adm = plan.get("admission") or {}
    lines.append(f"excluded: {len(plan['excluded'])} skills, {adm.get('excluded', 0)} of them by admission "
                 "(`--json` lists each with its reasons)")
    if adm.get("mode") == "first":
        lines.append(f"admission first: the admitted skills are ranked first; {adm.get('ranked_after', 0)} not admitted "
                     "follow them (--admission on would exclude them)")
    fc = plan["first_candidate"]
    what = f"{fc['backend']} {fc['skill'] or ''} {' '.join(fc['flags'] or [])}".strip() if fc["backend"] else \
        f"none (the run stops: {fc.get('stop')})"
    lines.append(shorten(f"gated first: {what}" + (f" ({fc['note']})" if fc.get("note") else ""), 160))
    for p in fc["passed_over"]:
        lines.append("  " + shorten(f"passed over: {p['skill']} ({p['note']})", 156))
    for cls, other in plan["first_candidate_by_bottleneck"].items():
        if (other["backend"], other["skill"], other["flags"]) != (fc["backend"], fc["skill"], fc["flags"]):
            lines.append(f"  if the start measures {cls}-bound: {other['backend']} {other['skill'] or ''} "
                         f"{' '.join(other['flags'] or [])}".rstrip())
    axes = plan["sweep_axes"]
    lines += wrapped(f"sweep axes of the start: {_axes_text(axes['start'])}")
    if "after_first" in axes:
        lines += wrapped(f"sweep axes after {fc['skill']}: {_axes_text(axes['after_first'])}")
    for backend, first in plan["first"].items():
        if backend == "sweep":
            pts = "; ".join(",".join(f"{k}={v}" for k, v in p.items()) for p in first["points"]) or "none"
            lines.append(shorten(f"sweep, first round: {pts}", 160))
            continue
        lines.append(shorten(f"{backend}, first candidate: {first['skill'] or '-'}"
                             + (f" ({first['note']})" if first.get("note") else ""), 160))
    if "prompt" in plan:
        lines.append(f"llm prompt for {plan['first']['llm']['skill']}:\n{plan['prompt']}\n\n-- estimate: "
                     f"{json.dumps(plan['estimate'])}")
    return "\n".join(lines)


class _ApplyProgress:
    """Apply progress: candidate steps gated of the budget, steps kept, gate verdicts by status. A step
    is kept after it is recorded (its re-measurement decides), so the count reads the steps seen so
    far each time, and once more at the end."""

    def __init__(self, quiet: bool, label: str, total: int | None):
        from klineage.progress import Progress
        self.p = Progress(quiet)
        self.counts: dict[str, int] = {}
        self.steps: list[dict] = []
        self.p.task("apply", label, total=total)

    @property
    def kept(self) -> int:
        return sum(bool(s["accepted"] and s["kind"] == "candidate") for s in self.steps)

    def __call__(self, step: dict) -> None:
        self.counts[step["status"]] = self.counts.get(step["status"], 0) + 1
        self.steps.append(step)
        self.p.update("apply", advance=1 if step["kind"] == "candidate" else 0, say=step["kind"] != "candidate",
                      note=f"kept {self.kept} · {counts_text(self.counts)}")

    def done(self):
        if self.steps:
            self.p.update("apply", note=f"kept {self.kept} · {counts_text(self.counts)}")
        self.p.close()


def execute_apply(store, wl, start: str, origin: str, cfg, llm, replay: bool, gate_config=None,
                   quiet: bool = True) -> dict:
    from klineage.apply.loop import apply
    from klineage.gate.gate import Gate
    if replay:
        from klineage.store.recorded import import_recorded
        import_recorded(store)
    if not store.skills():
        raise click.ClickException(f"no skills in {store.path}: mine first (klineage mine --config pipelines/mine.toml) "
                                   "or pass --db with a copy of skills_db/skills.duckdb")
    gate = Gate(store, gate_config)
    progress = _ApplyProgress(quiet, f"apply {wl.name}", cfg.budget_steps)
    try:
        run = apply(store, gate, wl, start, origin, cfg, llm=llm, replay=replay, progress=progress)
        if run["stop_reason"] == "start_failed":
            run["start_error"] = start_error(store, run, origin)
        return run
    finally:
        progress.done()
        gate.close()



@apply_cmd.command("list")
@reads_library
def apply_list(db_path, as_json):
    """List stored apply runs: id, workload, stop reason, skills kept."""
    with open_db(db_path) as store:
        runs = store.apply_runs()
    if as_json:
        click.echo(json.dumps(runs, indent=1, default=str))
        return
    if not runs:
        click.echo("no apply runs stored: run `klineage apply --workload DIR --start KERNEL.cu`")
        return
    rows = []
    for r in runs:
        kept = (r.get("summary") or {}).get("kept", [])
        rows.append([r["run_id"], r["workload"], r["stop_reason"], len(kept), clip(", ".join(kept), 80)])
    click.echo(table(["run", "workload", "stop", "kept", "skills kept"], rows, right=("kept",)))


@apply_cmd.command("show")
@click.argument("run_id")
@reads_library
def apply_show(run_id, db_path, as_json):
    """Replay a stored apply trajectory (RUN: a run id or its prefix)."""
    with open_db(db_path) as store:
        run = store.get_apply_run(run_id)
        if run is None:
            ids = ", ".join(r["run_id"] for r in store.apply_runs()[:10]) or "none stored"
            raise bad_input(f"no single apply run {run_id!r} in {store.path} (runs: {ids})")
    click.echo(json.dumps(run, indent=1, default=str) if as_json else format_apply_run(run))


def format_apply_run(run: dict) -> str:
    """An apply (or baseline) run as text: the stop and what was kept, why the start failed when it
    did, the speedups, then one row per step in fixed columns (long values shortened at a word)."""
    from klineage.report.text import shorten
    summ = run.get("summary") or {}
    kept = summ.get("kept", [])
    lines = [f"apply run {run['run_id']} on {run['workload']}: stop {run.get('stop_reason')}; kept {len(kept)}"
             + (f": {shorten(', '.join(kept), 110)}" if kept else "")]
    if run.get("start_error"):
        lines.append("  the start kernel failed the gate: " + shorten(run["start_error"][0], 120))
        lines += [f"  {l}" for l in run["start_error"][1:]]
    for c in summ.get("speedup_vs_start", []):
        shape = ",".join(f"{k}={v}" for k, v in sorted(c["shape"].items()))
        lines.append(f"  {shape}: {c['start_us']:.1f} us -> {c['best_us']:.1f} us ({c['speedup']:.2f}x)")
    rows = []
    for st in run.get("steps", []):
        point = ",".join(f"{k}={v}" for k, v in (st.get("config") or {}).items())
        what = st.get("skill") or (f"sweep {point}" if st["backend"] == "sweep" else st["backend"])
        mark = "kept" if st["accepted"] and st["kind"] == "candidate" else ""
        rows.append([st["seq"], st["backend"], shorten(what, 44), st["status"], mark, shorten(st.get("note") or "", 64)])
    if rows:
        lines.append(table(["step", "backend", "skill or sweep point", "verdict", "kept", "note"], rows,
                           right=("step",)))
    excluded = summ.get("excluded", [])
    if excluded:
        lines.append(f"excluded: {len(excluded)} skills" + (", the first 12:" if len(excluded) > 12 else ":"))
        lines += [f"  {shorten(e['name'] + ': ' + '; '.join(e['reasons']), 150)}" for e in excluded[:12]]
    return "\n".join(lines)


@main.group("baseline")
def baseline_group():
    """Run the published baselines (none, adaexplore, accelopt, expert-source) in this harness."""


@baseline_group.command("run")
@click.option("--method", type=click.Choice(["none", "adaexplore", "accelopt", "expert-source"]), required=True,
              help="The baseline to run.")
@click.option("-w", "--workload", "workload_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True,
              help="Workload folder (its workload.py).")
@click.option("-s", "--start", "start_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="The starting kernel (.cu).")
@click.option("--budget-usd", type=float, required=True, help="Dollars of model calls at most.")
@click.option("--max-iters", type=int, default=20, show_default=True, help="Model calls at most.")
@click.option("--budget-s", type=float, default=None, help="Wall-clock seconds at most.")
@click.option("--model", default=None, help="Model id (default claude-sonnet-4-5).")
@click.option("--base-url", default=None, help="An OpenAI-compatible server instead of the Anthropic API.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of adaexplore's tree search.")
@click.option("-n", "--dry-run", is_flag=True, help="Print the first prompt and its cost estimate; send nothing.")
@click.option("--replay", is_flag=True, help="Use recorded evaluations instead of a GPU.")
@click.option("-c", "--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Take the timing settings from a run configuration's [gate] table (e.g. pipelines/mine.toml).")
@arch_option
@db_option(mode="create")
@json_option
@library_errors
def baseline_run(method, workload_dir, start_path, budget_usd, max_iters, budget_s, model, base_url, seed, dry_run,
                 replay, config_path, arch, db_path, as_json):
    """One baseline method on one workload from a start kernel, under the same gate, budget
    accounting and trajectory records as `klineage apply` (read them with `klineage apply show`)."""
    from klineage.apply.baselines import Baseline, run_baseline
    from klineage.gate.gate import Gate
    from klineage.workload import load_workload

    wl = load_workload(workload_dir)
    start = read_source(start_path)
    llm = make_llm(("llm",), model, base_url, budget_usd, dry_run)
    if dry_run:
        echo_preview(llm.preview(*Baseline(method, llm, seed).prompt(wl, start, None,
                                                                      "edit" if method == "adaexplore" else None)), as_json)
        return
    from klineage.gate.gate import GateConfig
    gate_config = None
    if config_path is not None:
        from klineage.lineage.mine import load_config
        gate_config = load_config(config_path)[0].gate_config()
    if arch is not None:
        gate_config = dataclasses.replace(gate_config or GateConfig(), arch=arch)
    store = open_db(db_path)
    if replay:
        from klineage.store.recorded import import_recorded
        import_recorded(store)
    gate = Gate(store, gate_config)
    try:
        run = run_baseline(method, store, gate, wl, start, str(start_path), llm, max_iters=max_iters,
                           budget_s=budget_s, replay=replay, seed=seed)
    finally:
        gate.close()
        store.close()
    if as_json:
        click.echo(json.dumps({k: v for k, v in run.items() if k != "best_source"}, indent=1, default=str))
    else:
        click.echo(format_apply_run(run))
    if run["summary"]["missing"]:  # like mine: a replay that lacked records exits 4
        sys.exit(ExitCode.MISSING)
