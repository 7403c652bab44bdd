"""The mine command: backward walks over expert kernels, stored as lineages and skills."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from klineage.cli.common import (arch_option, counts_text, db_option, echo_preview, json_option, library_errors,
                                 main, make_llm, open_db)
from klineage.errors import ExitCode, read_source
from klineage.report.text import format_mine_summary


# -- mining ------------------------------------------------------------------------------------------

class _MineProgress:
    """Mining progress (klineage.progress): the walks done of all, the analysed steps done of the
    steps accepted, with the gate's verdicts counted by status."""

    def __init__(self, quiet: bool, walks: int):
        from klineage.progress import Progress
        self.p = Progress(quiet)
        self.counts: dict[str, int] = {}
        self.steps = self.rejected = 0
        self.label = None
        self.p.task("walk", "walks", total=walks)

    def __call__(self, label, event, **kw):
        if event == "evaluated":
            self.counts[kw["status"]] = self.counts.get(kw["status"], 0) + 1
        elif event == "missing":
            self.counts["NOT_REPLAYED"] = self.counts.get("NOT_REPLAYED", 0) + 1
        elif event == "step" and label != "analysis":
            self.steps += 1
        elif event == "rejected":
            self.rejected += 1
        if label == "analysis":
            if self.label != "analysis":  # the walks are over
                self.p.update("walk", advance=1 if self.label else 0)
                self.p.task("analysis", "analysis of accepted steps", total=self.steps)
                self.label = "analysis"
            self.p.update("analysis", advance=1 if event == "analysis" else 0, note=counts_text(self.counts),
                          description=f"analysis {kw.get('step', '')}".strip() if event == "analysis" else None)
            return
        if label != self.label:
            self.p.update("walk", advance=1 if self.label else 0)
            self.label = label
        self.p.update("walk", description=f"walk {label}", advance=0,
                      note=f"steps {self.steps} · rejected {self.rejected} · {counts_text(self.counts)}",
                      say=event in ("step", "rejected"))

    def done(self):
        if self.label and self.label != "analysis":
            self.p.update("walk", advance=1)
        self.p.close()


@main.command("mine")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@db_option(mode="rebuild")
@click.option("--proposer", type=click.Choice(["rules", "versions", "llm"]), default="rules", show_default=True,
              help="How backward steps are proposed.")
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A run configuration (pipelines/mine.toml): paths, proposers and limits.")
@click.option("--max-steps", type=int, default=None, help="Stop a lineage after this many accepted steps.")
@click.option("--max-rejections", type=int, default=None, help="Stop a lineage after this many rejected candidates.")
@click.option("--replay", is_flag=True, help="Use recorded evaluations (skills_db/evaluations) instead of a GPU.")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@click.option("--model", default=None, help="Model id for --proposer llm (default claude-sonnet-4-5).")
@click.option("--base-url", default=None, help="An OpenAI-compatible server for --proposer llm.")
@click.option("--budget-usd", type=float, default=None, help="Dollars of model calls at most (--proposer llm).")
@click.option("-n", "--dry-run", is_flag=True,
              help="Walk with compile-only gating (guard and nvcc; a kernel that builds is assumed to pass, nothing "
                   "runs) and print every proposal with the audit's verdict and reason; needs no GPU, stores nothing. "
                   "With --proposer llm the model is asked as in a real walk.")
@click.option("--prompt-only", is_flag=True,
              help="With --proposer llm: print the first prompt and its cost estimate; send nothing.")
@click.option("--executor", "executor_name", type=click.Choice(["serial", "local", "ray"]), default="serial",
              show_default=True,
              help="Where compiles and gate evaluations run: serial (this process, one at a time), local (one gate "
                   "worker per visible GPU, nvcc on every core) or ray (a Ray cluster). The library is the same.")
@click.option("--ray-address", default=None,
              help="With --executor ray: the cluster to join (HOST:PORT of `ray start --head`); default: a new local one.")
@click.option("--check-builds", is_flag=True,
              help="Build every kernel with the local nvcc even when its evaluation is stored (with --replay: shows "
                   "that the recorded kernels still build here; slower). By default a stored record is used unbuilt.")
@arch_option
@json_option
@library_errors
def mine_cmd(paths, db_path, proposer, config_path, max_steps, max_rejections, replay, quiet, model, base_url,
             budget_usd, dry_run, prompt_only, executor_name, ray_address, check_builds, arch, as_json):
    """Walk expert kernels backward and lift every accepted step into a skill."""
    import dataclasses

    from klineage.lineage.mine import MineRun, check_ladders, load_config, targets_for

    if config_path:
        run, _raw = load_config(config_path)
        if paths:
            raise click.BadParameter("give either PATHS or --config, not both", param_hint="PATHS")
    else:
        if not paths:
            raise click.BadParameter("name the kernels to mine (e.g. expert_kernels/) or pass --config",
                                     param_hint="PATHS")
        run = MineRun(targets_for(list(paths), proposer))
    if arch is not None:
        run.arch = arch
    over = {k: v for k, v in (("max_steps", max_steps), ("max_rejections", max_rejections)) if v is not None}
    if over:
        run.limits = dataclasses.replace(run.limits, **over)
    check_ladders(run)  # a bad ladder declaration is an error before anything is built or stored
    if dry_run and (replay or prompt_only):
        raise click.BadParameter("a dry run gates nothing: leave out --replay and --prompt-only", param_hint="--dry-run")
    llm = None
    if any(t.proposer == "llm" for t in run.targets):
        llm = make_llm(("llm",), model, base_url, budget_usd, prompt_only)
        if prompt_only:
            from klineage.lineage.llm_proposer import LLMProposer
            from klineage.mechanisms import detect_all
            tgt = next(t for t in run.targets if t.proposer == "llm")
            src = read_source(tgt.start)
            echo_preview(llm.preview(*LLMProposer(llm).prompt(src, detect_all(src), None)), as_json)
            return
    elif prompt_only:
        raise click.BadParameter("--prompt-only previews the llm proposer's prompt: add --proposer llm",
                                 param_hint="--prompt-only")
    if dry_run:
        from klineage.lineage.mine import dry_run as dry_walk, format_dry_run
        progress = _MineProgress(quiet or as_json, len(run.targets))
        try:
            out = dry_walk(run, progress=progress, llm=llm)
        finally:
            progress.done()
        if llm is not None:
            out["llm"] = {"model": llm.model, "calls": len(llm.exchanges), "spent_usd": round(llm.spent_usd, 6)}
        click.echo(json.dumps(out, indent=1, default=str) if as_json else format_dry_run(out))
        return
    if ray_address and executor_name != "ray":
        raise click.BadParameter("--ray-address needs --executor ray", param_hint="--ray-address")
    from klineage.exec import make_executor
    executor = make_executor(executor_name, ray_address=ray_address)
    store = open_db(db_path)
    try:
        summary = execute_mine(run, store, replay, quiet or as_json, llm=llm, executor=executor,
                                build_stored=check_builds)
    finally:
        store.close()
        if executor is not None:
            executor.close()
    if executor is not None:
        summary["executor"] = executor.stats()
    if llm is not None:  # the model calls' accounting (the lineage records the budget stop, if any)
        summary["llm"] = {"model": llm.model, "calls": len(llm.exchanges), "spent_usd": round(llm.spent_usd, 6),
                          "budget_usd": llm.budget_usd}
    click.echo(json.dumps(summary, indent=1, default=str) if as_json else format_mine_summary(summary))
    if summary["missing"]:
        sys.exit(ExitCode.MISSING)


def execute_mine(run, store, replay: bool, quiet: bool, llm=None, executor=None, build_stored: bool = False) -> dict:
    from klineage.gate.gate import Gate
    from klineage.lineage.mine import run_mine
    from klineage.store.recorded import import_recorded, load_compiler_records
    load_compiler_records(replay)  # the corpus's compiler evidence: no nvcc for a kernel it records
    if replay:
        import_recorded(store)
    gate = Gate(store, run.gate_config(), build_stored=build_stored)
    progress = _MineProgress(quiet, len(run.targets))
    try:
        return run_mine(run, store, gate, replay=replay, progress=progress, llm=llm, executor=executor)
    finally:
        progress.done()
        gate.close()
