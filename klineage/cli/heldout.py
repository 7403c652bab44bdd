"""The heldout command: the held-out transfer check."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import click

from klineage.cli.common import DbTarget, counts_text, db_option, json_option, library_errors, main, open_db
from klineage.errors import ExitCode


# -- the held-out check -------------------------------------------------------------------------------

class _HeldoutProgress:
    """Held-out progress: rows (instance x condition) decided of all, the one at work, steps gated."""

    def __init__(self, quiet: bool, rows: int):
        from klineage.progress import Progress
        self.p = Progress(quiet)
        self.counts: dict[str, int] = {}
        self.steps = 0
        self.p.task("heldout", "held-out", total=rows)

    def __call__(self, event: str, **kw) -> None:
        if event == "step":
            self.steps += 1
            st = kw["step"]["status"]
            self.counts[st] = self.counts.get(st, 0) + 1
            self.p.update("heldout", description=f"heldout {kw['instance']} {kw['condition']}",
                          note=f"steps {self.steps} · {counts_text(self.counts)}", say=True)
        else:
            r = kw["row"]
            self.p.update("heldout", advance=1, description=f"heldout {r['instance']} {r['condition']}: {r['status']}")

    def done(self):
        self.p.close()


def _split(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def execute_heldout(store, hp, replay: bool, quiet: bool, families=None, names=None) -> dict:
    """Run a held-out pipeline (klineage.pipelines.HeldoutPipeline) into `store`; returns the report
    and writes the outputs when the pipeline names an out folder."""
    from klineage.gate.gate import Gate
    from klineage.heldout import load_instances, run_heldout, write_outputs
    from klineage.heldout.run import llm_status
    from klineage.store.recorded import load_front_end
    instances = load_instances(hp.root, families, names)
    load_front_end(hp.records, replay=replay)  # which sweep points build, as the recorded run was told
    corpus = None
    if replay:
        from klineage.heldout.records import adopt_library, find_library_record, read_library_record
        from klineage.store.recorded import import_paths
        import_paths(store, hp.records)
        found = find_library_record(hp.records)
        if found is not None:  # the library and corpus the recorded run measured, not today's
            rec = read_library_record(found)
            corpus = rec["corpus"]
            said = adopt_library(store, rec)
            if said:
                click.echo(said, err=True)
    if not store.skills():
        raise click.ClickException(f"no skills in {store.path}: pass --db with a copy of skills_db/skills.duckdb")
    llm, reason = (None, None)
    if "llm" in hp.config.conditions:
        llm, reason = llm_status(replay, hp.config.model, hp.config.budget_usd)
    gate = Gate(store, hp.config.gate_config())
    progress = _HeldoutProgress(quiet, len(instances) * len(hp.config.conditions))
    try:
        report = run_heldout(store, gate, instances, hp.config, hp.root, replay=replay, llm=llm, llm_reason=reason,
                             progress=progress, corpus=corpus)
    finally:
        progress.done()
        gate.close()
    if hp.out is not None:
        write_outputs(report, store, hp.out)
    if replay:
        from klineage.heldout.records import format_replay_check, recorded_report, replay_check
        recorded = recorded_report(hp.records, [i.name for i in instances])
        if recorded is not None:
            chk = replay_check(recorded, report)
            if hp.out is not None:
                Path(hp.out, "replay_check.json").write_text(json.dumps(chk, indent=1, sort_keys=True) + "\n")
            click.echo(format_replay_check(chk), err=True)
    return report


@main.command("heldout")
@click.argument("root", required=False, type=click.Path(file_okay=False, path_type=Path))
@db_option(mode="create")
@click.option("-c", "--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A held-out pipeline (pipelines/heldout.toml): its [heldout] and [gate] tables; options given "
                   "here override it.")
@click.option("--conditions", default=None,
              help="Comma-separated conditions (default all): idiom, skills, control-random, control-foreign, "
                   "control-structural (with --structural on), llm.")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write heldout.json, heldout.txt and kernels/INSTANCE/CONDITION.cu here (default: the config's out).")
@click.option("--budget", type=int, default=None, help="Candidate kernels gated per instance and condition at most (default 12).")
@click.option("--seed", type=int, default=None, help="Seed of the random control (default 0).")
@click.option("--final-rounds", type=int, default=None,
              help="Final measurements of each condition's kernel, each in a worker of its own (default 2).")
@click.option("--sweep-rounds", type=int, default=None,
              help="Rounds of the steered sweep (skills, control-foreign): 1 sweeps the start's neighbourhood once, "
                   "N > 1 sweeps again around each kept winner (after a round that kept none, the next points "
                   "of the same order) within the budget (default 1).")
@click.option("--sweep-axes", type=click.Choice(["source", "buildable"]), default=None,
              help="How the sweep counts its grid when it picks its axes: every configuration, or only those "
                   "nvcc's front end accepts (the kernel's static checks; needs nvcc) (default source).")
@click.option("--families", default=None, help="Only these families (comma-separated: gemm, attention, reduction).")
@click.option("--instances", "names", default=None, help="Only these instances (comma-separated names).")
@click.option("--vendor", type=click.Choice(["auto", "primary", "fallback"]), default=None,
              help="Reference: auto (the primary FlagGems kernel; its VENDOR_FALLBACK when the primary fails while "
                   "timing the idiom kernel), or force one (default auto).")
@click.option("--admission", type=click.Choice(["on", "off"]), default=None,
              help="Retrieve only admitted skills (default on).")
@click.option("--structural", type=click.Choice(["on", "off"]), default=None,
              help="Structural rewrites before sweeping, one arm from the naive start of a reduction (else the "
                   "idiom kernel); control-random takes the same rewriters in a seeded random order (default off).")
@click.option("--replay", is_flag=True, help="Use recorded evaluations instead of a GPU.")
@click.option("--records", multiple=True, type=click.Path(exists=True, path_type=Path),
              help="With --replay: record files or folders (*.jsonl, *.jsonl.gz) to import first (repeatable; "
                   "default: the config's records).")
@click.option("--model", default=None, help="Model id for the llm condition (default claude-sonnet-4-5).")
@click.option("--budget-usd", type=float, default=None, help="Dollars of model calls at most per instance (llm).")
@click.option("-n", "--dry-run", is_flag=True,
              help="Print the plan (instances, starts, tunables, references, foreign libraries, the first sweep "
                   "round of each searching condition); evaluate nothing.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@json_option
@library_errors
def heldout_cmd(root, db_path, config_path, conditions, out_dir, budget, seed, final_rounds, sweep_rounds, sweep_axes,
                families, names,
                vendor, admission, structural, replay, records, model, budget_usd, dry_run, quiet, as_json):
    """Run every held-out instance (ROOT, default heldout/) under the conditions idiom, skills,
    control-random, control-foreign and llm, and report speedups over the reference with 95%
    intervals, geomeans with failures counted, and a memorization audit. Resumes a killed run;
    exits 4 when a replay lacks records."""
    from klineage.heldout.run import HeldoutConfig
    from klineage.pipelines import HeldoutPipeline, load_pipeline

    if config_path is not None:
        pl = load_pipeline(config_path)
        if pl.kind != "heldout":
            raise click.BadParameter(f"{config_path} is a {pl.kind} pipeline, not kind = \"heldout\"",
                                     param_hint="--config")
        hp = pl.run
    else:
        hp = HeldoutPipeline(Path("heldout"), HeldoutConfig(), [], None)
    over = {k: v for k, v in (("budget", budget), ("seed", seed), ("final_rounds", final_rounds),
                              ("sweep_rounds", sweep_rounds), ("sweep_axes", sweep_axes), ("vendor", vendor),
                              ("model", model), ("budget_usd", budget_usd)) if v is not None}
    if admission is not None:
        over["admission"] = admission == "on"
    if structural is not None:
        over["structural"] = structural == "on"
    if conditions:
        over["conditions"] = tuple(_split(conditions))
    try:
        hp.config = dataclasses.replace(hp.config, **over)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    hp.root = root or hp.root
    hp.out = out_dir or hp.out
    hp.records = list(records) or hp.records
    store = open_db(DbTarget(db_path.path, "read") if dry_run else db_path)  # a dry run only reads
    try:
        if dry_run:
            from klineage.heldout import load_instances
            from klineage.heldout.plan import plan
            from klineage.heldout.run import llm_status
            from klineage.store.recorded import load_front_end
            load_front_end(hp.records, replay=replay)
            reason = llm_status(replay, hp.config.model, hp.config.budget_usd)[1] if "llm" in hp.config.conditions else None
            p = plan(load_instances(hp.root, _split(families), _split(names)), hp.config, store, reason)
            click.echo(json.dumps(p, indent=1) if as_json else _format_plan(p))
            return
        if hp.out is None:
            raise click.UsageError("give --out DIR (or a --config whose [heldout] table names out)")
        report = execute_heldout(store, hp, replay, quiet or as_json, _split(families), _split(names))
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(report, indent=1, sort_keys=True))
    else:
        from klineage.report.text import format_heldout
        click.echo(format_heldout(report))
        click.echo(f"wrote {hp.out / 'heldout.json'}, {hp.out / 'heldout.txt'} and the kernels under {hp.out / 'kernels'}")
    if report["missing"]:
        sys.exit(ExitCode.MISSING)


def _format_plan(p: dict) -> str:
    """The held-out dry run as text: lines of at most 160 characters, values as `name=value`."""
    from klineage.report.text import wrapped
    cfg = p["config"]
    lines = wrapped(f"conditions {', '.join(p['conditions'])}; budget {cfg['budget']}; final rounds {cfg['final_rounds']}; "
                    f"library {p['library']['skills']} skills")
    if p.get("llm"):
        lines += wrapped(f"llm: {p['llm']}")
    for fam, names in p["library"]["foreign"].items():
        lines += wrapped(f"foreign library for {fam}: {len(names)} skills: {', '.join(names)}", "  ")
    for i in p["instances"]:
        starts = ", ".join(f"{k} {v}" for k, v in i["starts"].items()) if isinstance(i["starts"], dict) else i["starts"]
        lines.append(f"  {i['family']:<10} {i['instance']:<24} starts {starts}")
        if i.get("tunables"):
            lines += wrapped("tunables " + ", ".join(f"{k}={v}" for k, v in i["tunables"].items()), "      ")
        lines += wrapped(f"reference {i['reference']}", "      ")
        if i["fallback"]:
            lines += wrapped(f"fallback {i['fallback']}", "      ")
        if i.get("sweep_space"):
            lines += wrapped(f"sweep axes ({cfg.get('sweep_axes', 'source')}): " + "; ".join(
                f"{k} {'/'.join(str(v) for v in vals)}" for k, vals in i["sweep_space"].items()), "      ")
        for cond, names in i.get("structural_path", {}).items():
            lines += wrapped(f"structural rewrites, {cond} (each on the last, if kept): {', '.join(names) or 'none'}",
                             "      ")
        for cond, pts in i.get("first_sweep_round", {}).items():
            lines += wrapped(f"first sweep round, {cond} ({', '.join(pts[0]) if pts else 'no points'}): " + "; ".join(
                ",".join(str(v) for v in pt.values()) for pt in pts), "      ")
    return "\n".join(lines)
