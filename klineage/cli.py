"""The klineage command line: parses options, calls the library, formats the output."""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import click

from klineage import __version__, settings
from klineage.errors import KLineageError
from klineage.report.text import format_gate_result, format_workload


def json_option(fn):
    """The shared --json flag: machine-readable output on stdout."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(fn)


def db_option(fn):
    return click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                        help="DuckDB file (default $KLINEAGE_DB or ./klineage.duckdb).")(fn)


def library_errors(fn):
    """Turn library errors into click errors (exit 1) whose message names the fix."""
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            return fn(*a, **kw)
        except KLineageError as exc:
            raise click.ClickException(str(exc)) from exc
    return wrapper


def _open_store(db_path: Path | None):
    from klineage.store import open_store
    return open_store(db_path or settings.default_db())


def _version_text() -> str:
    from klineage.gate.compile import nvcc_version
    from klineage.gate.pool import gpu_available
    nv = nvcc_version() or "not found"
    return f"klineage {__version__}\nnvcc {nv}\nGPU {'present' if gpu_available() else 'none'}"


def _print_version(ctx, _param, value):
    if value and not ctx.resilient_parsing:
        click.echo(_version_text())
        ctx.exit()


@click.group()
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and the toolchain found, then exit.")
def main():
    """KLineage: mine verified GPU-optimization skills from expert CUDA kernels."""


@main.command("toolchain")
@json_option
def toolchain(as_json):
    """Report the version and the toolchain found (nvcc, GPU)."""
    click.echo(json.dumps({"text": _version_text()}) if as_json else _version_text())


@main.command("gate")
@click.argument("kernels", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--workload", "workload_dir", type=click.Path(exists=True, path_type=Path), default=None,
              help="Workload folder (default: the nearest folder above the kernel holding workload.py).")
@db_option
@click.option("--replay", is_flag=True, help="Use recorded evaluations instead of a GPU.")
@click.option("--remeasure", is_flag=True, help="Measure again even if an identical evaluation is stored.")
@click.option("--shapes", type=click.Choice(["all", "benchmark"]), default="all",
              help="Check correctness on benchmark and probe shapes (all) or benchmark shapes only.")
@json_option
@library_errors
def gate_cmd(kernels, workload_dir, db_path, replay, remeasure, shapes, as_json):
    """Guard, compile, check and time KERNEL.cu files against their workload."""
    from klineage.gate.gate import Gate, GateConfig
    from klineage.workload import find_workload_for, load_workload

    store = _open_store(db_path)
    if replay:
        from klineage.store.recorded import import_recorded
        import_recorded(store)
    gate = Gate(store, GateConfig(shapes=shapes))
    results, failures = [], 0
    try:
        for k in kernels:
            wl = load_workload(workload_dir or find_workload_for(k))
            res = gate.evaluate_file(k, wl, replay=replay, remeasure=remeasure)
            results.append((k, res))
            if not as_json:
                click.echo(format_gate_result(str(k), res))
            failures += not res.passed
    finally:
        gate.close()
        store.close()
    if as_json:
        click.echo(json.dumps([{"kernel": str(k), **r.to_dict()} for k, r in results], indent=1, default=str))
    sys.exit(0 if failures == 0 else 3)


@main.group("workload")
def workload_group():
    """Inspect workload contracts."""


@workload_group.command("show")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@json_option
@library_errors
def workload_show(path, as_json):
    """Validate and describe a workload folder."""
    from klineage.workload import load_workload
    wl = load_workload(path)
    click.echo(json.dumps(wl.describe(), indent=1) if as_json else format_workload(wl))


@main.group("evals")
def evals_group():
    """List, import and export stored evaluations."""


@evals_group.command("list")
@db_option
@click.option("--status", default=None, help="Only this status.")
@json_option
@library_errors
def evals_list(db_path, status, as_json):
    """List stored evaluations, newest first."""
    with _open_store(db_path) as store:
        rows = store.find_evaluations(status=status)
    if as_json:
        click.echo(json.dumps(rows, indent=1, default=str))
        return
    for r in rows:
        tm = r["result"].get("timing") or []
        lat = f"{tm[0]['latency_us']:.1f} us" if tm else "-"
        click.echo(f"{r['eval_key'][:12]}  {r['workload_name']:<12} {r['status']:<15} {lat:>12}  "
                   f"{r['gpu'] or '-'}  {r['recorded_at']}")


@evals_group.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@db_option
@library_errors
def evals_import(files, db_path):
    """Import evaluation records (JSON Lines) into the database."""
    with _open_store(db_path) as store:
        for f in files:
            ins, skip = store.import_evaluations(f)
            click.echo(f"{f}: {ins} imported, {skip} already present")


@evals_group.command("export")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@db_option
@library_errors
def evals_export(file, db_path):
    """Export every stored evaluation to a JSON Lines file."""
    with _open_store(db_path) as store:
        n = store.export_evaluations(file)
    click.echo(f"{n} evaluations written to {file}")


if __name__ == "__main__":
    main()
