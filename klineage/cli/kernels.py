"""Commands on kernels and workloads: toolchain, features, gate, workload show|check, evals list|import|export."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import click

from klineage import settings
from klineage.cli.common import arch_option, clip, db_option, json_option, library_errors, main, open_db
from klineage.cli.common import _version_text, toolchain_facts
from klineage.errors import ExitCode, KLineageError, read_source
from klineage.report.text import format_gate_result, format_workload, table
from klineage.settings import display_path


@main.command("toolchain")
@json_option
def toolchain(as_json):
    """Report the version and the toolchain found (nvcc, GPU, libclang, tree-sitter grammar)."""
    click.echo(json.dumps(toolchain_facts(), indent=1) if as_json else _version_text())


@main.command("features")
@click.argument("kernel", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@arch_option(default="sm_90a", help="Target the PTX is compiled for.")
@click.option("--source-only", is_flag=True, help="Source detectors only: do not compile to PTX.")
@json_option
@library_errors
def features_cmd(kernel, arch, source_only, as_json):
    """List every mechanism in KERNEL with its locus and which evidence found it: the source
    detectors, the compiler (PTX with line info, compiled here on the CPU), or both. Exits 1, with
    nvcc's messages, when KERNEL does not compile."""
    from klineage.gate.compile import named
    from klineage.mechanisms.evidence import features_report
    from klineage.report.text import format_features
    rep = features_report(read_source(kernel), arch, compiler=not source_only)
    c = rep["compiler"]
    c["error"] = named(c.get("error"), str(kernel))
    c["messages"] = [named(m, str(kernel)) for m in c.get("messages", [])]
    click.echo(json.dumps({"kernel": str(kernel), **rep}, indent=1) if as_json else format_features(str(kernel), rep))
    if c.get("error_kind") in ("nvcc_error", "timeout", "memory_limit"):
        sys.exit(ExitCode.FAILED)  # the kernel does not compile: its features are the source's alone


@main.command("gate")
@click.argument("kernels", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-w", "--workload", "workload_dir", type=click.Path(exists=True, path_type=Path), default=None,
              help="Workload folder (default: the nearest folder above the kernel holding workload.py).")
@db_option(mode="create")
@click.option("--replay", is_flag=True, help="Use recorded evaluations instead of a GPU.")
@click.option("--remeasure", is_flag=True, help="Measure again even if an identical evaluation is stored.")
@click.option("--shapes", type=click.Choice(["all", "benchmark"]), default="all",
              help="Check correctness on benchmark and probe shapes (all) or benchmark shapes only.")
@click.option("-c", "--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Take the timing settings and arch from a run configuration's [gate] table (the shipped "
                   "experts' records were made with pipelines/mine.toml's).")
@arch_option
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr (nor with --json).")
@json_option
@library_errors
def gate_cmd(kernels, workload_dir, db_path, replay, remeasure, shapes, config_path, arch, quiet, as_json):
    """Guard, compile, check and time KERNEL.cu files against their workload.

    Without a GPU (and without --replay) each kernel is still guarded and built: the guard's
    findings and the build's ptxas resources are printed (text or --json), then why it stopped.
    Exits 0 when every kernel PASSED, 3 on another verdict, 4 when a replay lacks a record, 1
    when a kernel could not be evaluated (no GPU), 2 on bad input."""
    from klineage.gate.gate import Gate, GateConfig
    from klineage.progress import Progress
    from klineage.report.text import format_gate_stop
    from klineage.workload import find_workload_for, load_workload

    cfg = GateConfig(shapes=shapes)
    if config_path is not None:
        from klineage.lineage.mine import load_config
        cfg = dataclasses.replace(load_config(config_path)[0].gate_config(), shapes=shapes)
    if arch is not None:
        cfg = dataclasses.replace(cfg, arch=arch)
    store = _gate_store(db_path)
    if replay:
        from klineage.store.recorded import import_recorded
        import_recorded(store)
    gate = Gate(store, cfg)
    rows, codes = [], set()
    progress = Progress(quiet or as_json)
    progress.task("gate", "gate", total=len(kernels))
    try:
        for i, k in enumerate(kernels):
            gate.on_phase = lambda phase, _k=k: progress.update("gate", note=f"{_k.name}: {phase}", say=True)
            configs: list = [None]
            try:
                wl = load_workload(workload_dir or find_workload_for(k))
                # a workload with a LAUNCH axis: the kernel at each launch configuration (the default first)
                configs = wl.launch_configs() or [None]
            except KLineageError as exc:
                wl = exc
            for values in configs:
                name = str(k) if values is None else f"{k} (launch {', '.join(f'{a}={v}' for a, v in values.items())})"
                try:
                    if isinstance(wl, KLineageError):
                        raise wl
                    res = gate.evaluate_file(k, wl if values is None else wl.with_launch(values), replay=replay,
                                             remeasure=remeasure)
                except KLineageError as exc:  # reported with what was done before it; the next kernel goes on
                    if not as_json and getattr(exc, "exit_code", None) == ExitCode.BAD_INPUT:
                        raise  # bad input is one line that names the fix
                    row = {"kernel": str(k), "status": None, "error": str(exc), "error_kind": type(exc).__name__,
                           **getattr(exc, "partial", {})}
                    if getattr(exc, "differs", None):
                        row["differs"] = {f: {"recorded": a, "asked": b} for f, (a, b) in exc.differs.items()}
                        if "timing" in exc.differs:
                            row["error"] += _timing_hint(exc.differs["timing"][0])
                    codes.add(ExitCode(int(getattr(exc, "exit_code", ExitCode.FAILED))))
                    text = format_gate_stop(name, row)
                else:
                    row = {"kernel": str(k), **res.to_dict()}
                    if row.get("error_message"):
                        from klineage.gate.compile import named
                        row["error_message"] = named(row["error_message"], str(k))
                    codes.add(ExitCode.OK if res.passed else ExitCode.VERDICT)
                    text = format_gate_result(name, res)
                if values is not None:
                    row["launch"] = values
                rows.append(row)
                if not as_json:
                    click.echo(text)
            progress.update("gate", advance=1, note=f"{k.name}: {row['status'] or 'no verdict'}")
    finally:
        progress.close()
        gate.close()
        store.close()
        if as_json:  # printed whatever stops the loop
            click.echo(json.dumps(rows, indent=1, default=str))
    sys.exit(_worst(codes))


def _gate_store(db_path):
    """The gate's database; while a run writes it, an in-memory one (the gate still guards, builds,
    replays and reports, and says that nothing it finds is stored)."""
    from klineage.store import open_store
    from klineage.store.writer import WriterBusyError
    try:
        return open_db(db_path)
    except WriterBusyError as exc:
        click.echo(f"{str(exc).split(': wait for it')[0]}: this gate's results are not stored there (pass another "
                   "--db to keep them)", err=True)
        return open_store()


def _worst(codes: set) -> int:
    """One exit code for a command over many items: bad input, then a failure, then a missing
    record, then a verdict other than PASSED."""
    for c in (ExitCode.BAD_INPUT, ExitCode.FAILED, ExitCode.MISSING, ExitCode.VERDICT):
        if c in codes:
            return int(c)
    return int(ExitCode.OK)


def _timing_hint(recorded: dict | None) -> str:
    """Which shipped run configurations have the recorded timing settings in their [gate] table."""
    if not recorded:
        return ""
    from klineage.errors import read_toml
    from klineage.gate.gate import DEFAULT_TIMING
    found = []
    for p in sorted((settings.repo_root() / "pipelines").glob("*.toml")):
        try:
            raw = read_toml(p, KLineageError)[1]
        except KLineageError:
            continue
        table = raw.get("gate", {})
        timing = {**DEFAULT_TIMING, **{k: v for k, v in table.items() if k != "arch"}}
        if all(timing.get(k) == v for k, v in recorded.items()):
            found.append((raw.get("kind") != "mine", display_path(p)))  # the mining configurations first
    found = [f for _, f in sorted(found)]
    return (f" (the recorded timing is the [gate] table of {', '.join(found)}: pass --config {found[0]}, the run "
            "configuration that recorded it)") if found else ""


@main.group("workload")
def workload_group():
    """Inspect and check workload contracts."""


@workload_group.command("show")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@json_option
@library_errors
def workload_show(path, as_json):
    """Validate and describe a workload folder: signature, shapes, tolerance, reference, and the
    build targets its kernels need (`workload check` runs its functions)."""
    from klineage.workload import load_workload
    wl = load_workload(path)
    targets = _kernel_targets(wl.path)
    if as_json:
        click.echo(json.dumps({**wl.describe(), "kernels": targets}, indent=1))
        return
    click.echo(format_workload(wl))
    for name, need in targets.items():
        click.echo(f"  kernel {name}: {need or 'builds for every target from sm_80 on'}")


def _kernel_targets(folder: Path) -> dict:
    """{kernel file: the sentence naming the targets it needs, or None} for the .cu files of a
    workload folder and of its versions/ ladder (`versions/NAME.cu`, in the ladder's natural order;
    klineage.gate.gate.arch_needs)."""
    from klineage.gate.gate import arch_needs
    from klineage.lineage.ladder import natural_key
    folder = folder if folder.is_dir() else folder.parent
    files = sorted(folder.glob("*.cu")) + sorted((folder / "versions").glob("*.cu"), key=lambda p: natural_key(p.name))
    return {str(p.relative_to(folder)): arch_needs(p.read_text(errors="replace")) for p in files}


@workload_group.command("check")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@json_option
@library_errors
def workload_check(path, as_json):
    """Run a workload's contract on a tiny shape on the CPU: make_inputs, outputs, scalars,
    reference and vendor, checking names, shapes, dtypes and finiteness, and the vendor against the
    reference within the tolerance. Exits 1 when a function fails (a vendor that needs a GPU is
    reported as skipped), 0 otherwise."""
    from klineage.gate.contract import check_contract
    from klineage.workload import load_workload
    wl = load_workload(path)
    report = check_contract(wl)
    if as_json:
        click.echo(json.dumps(report, indent=1, default=str))
    else:
        click.echo(f"{wl.name}: contract on the CPU at {report['shape_text']} ({report['why_shape']})")
        click.echo(table(["function", "result", "detail"],
                         [[c["function"], c["result"], clip(c["detail"], 160)] for c in report["checks"]]))
        click.echo(f"{wl.name}: {'ok' if report['ok'] else 'FAILED'}")
    sys.exit(ExitCode.OK if report["ok"] else ExitCode.FAILED)


@main.group("evals")
def evals_group():
    """List, import and export stored evaluations."""


_STATUSES = ("COMPILE_ERROR", "GUARD_REJECTED", "RUNTIME_ERROR", "TIMEOUT", "INCORRECT", "PASSED")


@evals_group.command("list")
@db_option
@click.option("--status", type=click.Choice(_STATUSES, case_sensitive=False), default=None,
              help="Only evaluations with this gate status.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many (the newest).")
@json_option
@library_errors
def evals_list(db_path, status, limit, as_json):
    """List stored evaluations, newest first."""
    with open_db(db_path) as store:
        rows = store.find_evaluations(status=status.upper() if status else None, limit=limit)
    if as_json:
        click.echo(json.dumps(rows, indent=1, default=str))
        return
    if not rows:
        click.echo(f"no evaluations{f' with status {status.upper()}' if status else ''} in {store.path}")
        return
    body = []
    for r in rows:
        tm = r["result"].get("timing") or []
        body.append([r["eval_key"][:12], r["workload_name"], r["status"],
                     f"{tm[0]['latency_us']:.1f}" if tm else "-", r["gpu"] or "-", r["recorded_at"]])
    click.echo(table(["key", "workload", "status", "latency (us)", "GPU", "recorded"], body, right=("latency (us)",)))


@evals_group.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@db_option(mode="create")
@library_errors
def evals_import(files, db_path):
    """Import evaluation records (JSON Lines) into the database."""
    with open_db(db_path) as store:
        for f in files:
            ins, skip = store.import_evaluations(f)
            click.echo(f"{f}: {ins} imported, {skip} already present")


@evals_group.command("export")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@db_option
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@library_errors
def evals_export(file, db_path, quiet):
    """Export every stored evaluation to a JSON Lines file (gzip-compressed when FILE ends in .gz)."""
    from klineage.progress import Progress
    with open_db(db_path) as store, Progress(quiet) as progress:
        progress.task("export", f"export to {file}")
        n = store.export_evaluations(file, progress=lambda done, total: progress.set("export", done, total))
    click.echo(f"{n} evaluations written to {file}")
