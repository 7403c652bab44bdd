"""The run command: a declarative pipeline (pipelines/NAME.toml), recorded with its configuration."""
from __future__ import annotations

import dataclasses
import json
import sys

import click

from klineage.cli.common import (ShippedPath, arch_option, bad_input, db_option, json_option, library_errors, main,
                                 make_llm, open_db)
from klineage.cli.apply import execute_apply, format_apply_run
from klineage.cli.heldout import execute_heldout
from klineage.cli.mine import execute_mine
from klineage.errors import ExitCode, read_source
from klineage.report.text import format_mine_summary


@main.command("run")
@click.argument("pipeline", type=ShippedPath())
@db_option(mode="rebuild")
@click.option("--replay", is_flag=True, help="Use recorded evaluations instead of a GPU.")
@arch_option
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@json_option
@library_errors
def run_cmd(pipeline, db_path, replay, arch, quiet, as_json):
    """Execute a declarative pipeline (pipelines/NAME.toml: kind = mine | apply | heldout), validated strictly,
    and record it with its configuration in the database. Exits 1 when the run failed (an apply whose
    start kernel fails the gate), 4 when a replay lacked records. A PIPELINE that is not there is looked up
    among the shipped ones (pipelines/NAME.toml of the corpus installed with the package)."""
    from klineage import pipelines
    from klineage.pipelines import load_pipeline
    from klineage.workload import load_workload

    pl = load_pipeline(pipeline)
    if arch is not None:
        if pl.kind == "heldout":
            raise bad_input("--arch: the held-out pipeline's instances and records are sm_90a builds; "
                             "leave --arch out")
        if pl.kind == "mine":
            pl.run.arch = arch
    llm = None
    if pl.kind == "apply":
        ap = pl.run
        llm = make_llm(ap.config.materializers, ap.config.model, ap.base_url, ap.config.budget_usd)
    store = open_db(db_path)
    rec = pipelines.start_record(pl, pipeline, replay)
    rid = rec["run_id"]
    store.put_pipeline_run(rec)
    outcome, result = "failed", None
    try:
        if pl.kind == "mine":
            result = execute_mine(pl.run, store, replay, quiet or as_json)
        elif pl.kind == "heldout":
            result = execute_heldout(store, pl.run, replay, quiet or as_json)
        else:
            from klineage.apply.loop import write_outputs
            from klineage.gate.gate import gate_config_for
            ap = pl.run
            if replay and ap.records:
                pipelines.import_apply_records(store, ap, pipeline)
            gcfg = gate_config_for(ap.gate)
            if arch is not None:
                gcfg = dataclasses.replace(gcfg, arch=arch)
            result = execute_apply(store, load_workload(ap.workload), read_source(ap.start), str(ap.start), ap.config,
                                    llm, replay, gcfg, quiet=quiet or as_json)
            if ap.out:
                write_outputs(result, ap.out)
        outcome = pipelines.outcome(pl.kind, result)
    finally:
        summary = pipelines.summary(pl.kind, result)
        store.put_pipeline_run({**rec, "outcome": outcome, "summary": summary})
        store.close()
    if as_json:
        click.echo(json.dumps({"pipeline_run": rid, "kind": pl.kind, "outcome": outcome,
                               "result": {k: v for k, v in result.items() if k != "best_source"}}, indent=1, default=str))
    else:
        if pl.kind == "heldout":
            from klineage.report.text import format_heldout
            click.echo(format_heldout(result))
        else:
            click.echo(format_mine_summary(result) if pl.kind == "mine" else format_apply_run(result))
        click.echo(f"pipeline run {rid} ({pl.name}, {pl.kind}): {outcome}")
    sys.exit({"ok": ExitCode.OK, "missing": ExitCode.MISSING}.get(outcome, ExitCode.FAILED))
