"""The klineage command line: parses options, calls the library, formats the output.

Every command exits with a code of klineage.errors.ExitCode (the table in docs/cli.md)."""
from __future__ import annotations

import dataclasses
import functools
import json
import sys
from pathlib import Path

import click

from klineage import __version__, settings
from klineage.settings import display_path
from klineage.errors import EXIT_CODE_MEANING, ExitCode, KLineageError, read_source
from klineage.report.text import (format_gate_result, format_lineage, format_lineages_table, format_mine_summary,
                                  format_skills_table, format_workload, table)


def json_option(fn):
    """The shared --json flag: machine-readable output on stdout."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(fn)


@dataclasses.dataclass(frozen=True)
class DbTarget:
    """The --db value with how its command opens it: "read" (it must exist; opened read-only, no
    migration), "extend" (it must exist; written), "create" (created with its folders if missing) or
    "rebuild" (as create; mine and run, the commands that build a library, the only ones that may
    write the shipped one)."""
    path: Path | None  # None: the default, $KLINEAGE_DB or ./klineage.duckdb
    mode: str


_DB_HELP = {
    "read": "An existing DuckDB file, opened read-only (default $KLINEAGE_DB or ./klineage.duckdb).",
    "extend": "An existing DuckDB file holding a skill library, e.g. a copy of skills_db/skills.duckdb "
              "(default $KLINEAGE_DB or ./klineage.duckdb).",
    "create": "DuckDB file, created with its folders when missing (default $KLINEAGE_DB or ./klineage.duckdb).",
}
_DB_HELP["rebuild"] = _DB_HELP["create"]


def db_option(fn=None, *, mode: str = "read"):
    """The shared --db option; `@db_option` for commands that read, `@db_option(mode=...)` for those
    that write ("create" or "extend"). The command receives a DbTarget for _open_store."""
    def deco(f):
        return click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                            callback=lambda _ctx, _param, value: DbTarget(value, mode), help=_DB_HELP[mode])(f)
    return deco(fn) if fn is not None else deco


def arch_option(fn):
    """The shared --arch option: the build target of every gate evaluation."""
    from klineage.gate.compile import ARCHS
    return click.option("--arch", type=click.Choice(ARCHS), default=None,
                        help="Build target of the GPU in hand (default: the configuration's [gate] arch, else "
                             "sm_90a, Hopper; kernels using wgmma build for sm_90a only).")(fn)


def _clip(text: str, n: int) -> str:
    text = str(text)
    return text if len(text) <= n else text[:n - 3] + "..."


def _bad_input(message: str) -> click.ClickException:
    """A one-line error for input the command cannot use (exit 2)."""
    err = click.ClickException(message)
    err.exit_code = int(ExitCode.BAD_INPUT)
    return err


def _usage_error(exc: KLineageError) -> click.ClickException:
    err = click.ClickException(str(exc))
    err.exit_code = int(getattr(exc, "exit_code", ExitCode.FAILED))
    return err


def library_errors(fn):
    """Turn library errors into one-line click errors whose message names the fix, exiting with the
    error's ExitCode; with --debug the traceback is shown instead."""
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            return fn(*a, **kw)
        except KLineageError as exc:
            if _DEBUG["on"]:
                raise
            raise _usage_error(exc) from exc
    return wrapper


_DEBUG = {"on": False}


class _Main(click.Group):
    """The root group: an unexpected exception is one line (and exit 1) unless --debug is given;
    Ctrl-C exits 130."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("interrupted: what was decided before is stored; run the command again to continue",
                       err=True)
            raise click.exceptions.Exit(ExitCode.INTERRUPTED) from None
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except KLineageError as exc:
            if _DEBUG["on"]:
                raise
            raise _usage_error(exc) from exc
        except Exception as exc:
            if _DEBUG["on"]:
                raise
            raise click.ClickException(f"internal error: {type(exc).__name__}: {exc} "
                                       "(run again with --debug for the traceback, and report it)") from exc


def _open_store(db: DbTarget):
    """The command's database, opened as its --db option says; a missing one is created only by a
    command that writes ("create"), else one line naming the fix (exit 2) and nothing is made."""
    from klineage.errors import StoreError
    from klineage.store import MissingDatabaseError, open_store
    path = db.path or settings.default_db()
    if db.mode in ("extend", "create") and path.resolve() == settings.shipped_library().resolve():
        raise StoreError(f"{path} is the shipped library, which only mine and run (rebuilding it) write: copy it "
                         f"(cp {path} lib.duckdb) and pass --db lib.duckdb")
    try:
        return open_store(path, read_only=db.mode == "read", create=db.mode in ("create", "rebuild"))
    except MissingDatabaseError:
        where = "" if db.path else " (the default: $KLINEAGE_DB or ./klineage.duckdb)"
        fix = ("; klineage mine, run, gate and evals import create one" if db.mode == "read"
               else " (a copy of it: this command writes to it)")
        raise StoreError(f"no database at {path}{where}: pass --db with an existing one, e.g. "
                         f"--db skills_db/skills.duckdb for the shipped library{fix}") from None


def toolchain_facts() -> dict:
    """Version and toolchain: nvcc, GPU, libclang, the tree-sitter CUDA grammar, torch, duckdb."""
    from importlib import metadata

    from klineage.gate.compile import nvcc_version
    from klineage.gate.pool import gpu_available

    def dist(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None
    try:
        from klineage.parse.semantics import libclang_version
        clang = libclang_version()
    except Exception as exc:  # a broken libclang install is a fact to report, not a crash
        clang = f"unavailable ({type(exc).__name__}: {exc})"
    return {"klineage": __version__, "nvcc": nvcc_version() or None, "gpu": "present" if gpu_available() else "none",
            "libclang": clang, "tree_sitter": dist("tree-sitter"), "tree_sitter_cuda": dist("tree-sitter-cuda"),
            "torch": dist("torch"), "duckdb": dist("duckdb"), "anthropic": dist("anthropic")}


def _version_text() -> str:
    f = toolchain_facts()
    return "\n".join([f"klineage {f['klineage']}", f"nvcc {f['nvcc'] or 'not found'}", f"GPU {f['gpu']}",
                      f"libclang {f['libclang'] or 'not found'}",
                      f"tree-sitter {f['tree_sitter'] or 'not found'} (grammar: tree-sitter-cuda {f['tree_sitter_cuda'] or 'not found'})",
                      f"torch {f['torch'] or 'not found'}, duckdb {f['duckdb'] or 'not found'}"])


def _print_version(ctx, _param, value):
    if value and not ctx.resilient_parsing:
        click.echo(_version_text())
        ctx.exit()


def _set_debug(ctx, _param, value):
    _DEBUG["on"] = bool(value)


EXIT_CODES_EPILOG = "\b\nExit codes:\n" + "\n".join(f"  {int(c):>3}  {m}" for c, m in EXIT_CODE_MEANING.items())


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_EPILOG)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and the toolchain found, then exit.")
@click.option("--debug", is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
              help="Show the full traceback of an error instead of its one-line message.")
def main():
    """KLineage: mine verified GPU-optimization skills from expert CUDA kernels."""


@main.command("toolchain")
@json_option
def toolchain(as_json):
    """Report the version and the toolchain found (nvcc, GPU, libclang, tree-sitter grammar)."""
    click.echo(json.dumps(toolchain_facts(), indent=1) if as_json else _version_text())


@main.command("features")
@click.argument("kernel", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--arch", default="sm_90a", show_default=True, help="Target the PTX is compiled for.")
@click.option("--source-only", is_flag=True, help="Source detectors only: do not compile to PTX.")
@json_option
@library_errors
def features_cmd(kernel, arch, source_only, as_json):
    """List every mechanism in KERNEL with its locus and which evidence found it: the source
    detectors, the compiler (PTX with line info, compiled here on the CPU), or both."""
    from klineage.mechanisms.evidence import features_report
    from klineage.report.text import format_features
    rep = features_report(read_source(kernel), arch, compiler=not source_only)
    click.echo(json.dumps({"kernel": str(kernel), **rep}, indent=1) if as_json else format_features(str(kernel), rep))


@main.command("gate")
@click.argument("kernels", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--workload", "workload_dir", type=click.Path(exists=True, path_type=Path), default=None,
              help="Workload folder (default: the nearest folder above the kernel holding workload.py).")
@db_option(mode="create")
@click.option("--replay", is_flag=True, help="Use recorded evaluations instead of a GPU.")
@click.option("--remeasure", is_flag=True, help="Measure again even if an identical evaluation is stored.")
@click.option("--shapes", type=click.Choice(["all", "benchmark"]), default="all",
              help="Check correctness on benchmark and probe shapes (all) or benchmark shapes only.")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Take the timing settings and arch from a run configuration's [gate] table (the shipped "
                   "experts' records were made with pipelines/mine.toml's).")
@arch_option
@click.option("--quiet", is_flag=True, help="No progress on stderr (nor with --json).")
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
    store = _open_store(db_path)
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
            try:
                wl = load_workload(workload_dir or find_workload_for(k))
                res = gate.evaluate_file(k, wl, replay=replay, remeasure=remeasure)
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
                text = format_gate_stop(str(k), row)
            else:
                row = {"kernel": str(k), **res.to_dict()}
                codes.add(ExitCode.OK if res.passed else ExitCode.VERDICT)
                text = format_gate_result(str(k), res)
            rows.append(row)
            progress.update("gate", advance=1, note=f"{k.name}: {row['status'] or 'no verdict'}")
            if not as_json:
                click.echo(text)
    finally:
        progress.close()
        gate.close()
        store.close()
        if as_json:  # printed whatever stops the loop
            click.echo(json.dumps(rows, indent=1, default=str))
    sys.exit(_worst(codes))


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
    workload folder (klineage.gate.gate.arch_needs)."""
    from klineage.gate.gate import arch_needs
    folder = folder if folder.is_dir() else folder.parent
    return {p.name: arch_needs(p.read_text(errors="replace")) for p in sorted(folder.glob("*.cu"))}


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
                         [[c["function"], c["result"], _clip(c["detail"], 160)] for c in report["checks"]]))
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
    with _open_store(db_path) as store:
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
    with _open_store(db_path) as store:
        for f in files:
            ins, skip = store.import_evaluations(f)
            click.echo(f"{f}: {ins} imported, {skip} already present")


@evals_group.command("export")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@db_option
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@library_errors
def evals_export(file, db_path, quiet):
    """Export every stored evaluation to a JSON Lines file (gzip-compressed when FILE ends in .gz)."""
    from klineage.progress import Progress
    with _open_store(db_path) as store, Progress(quiet) as progress:
        progress.task("export", f"export to {file}")
        n = store.export_evaluations(file, progress=lambda done, total: progress.set("export", done, total))
    click.echo(f"{n} evaluations written to {file}")


# -- mining ------------------------------------------------------------------------------------------

def _counts(counts: dict) -> str:
    return " ".join(f"{k} {v}" for k, v in sorted(counts.items()))


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
            self.p.update("analysis", advance=1 if event == "analysis" else 0, note=_counts(self.counts),
                          description=f"analysis {kw.get('step', '')}".strip() if event == "analysis" else None)
            return
        if label != self.label:
            self.p.update("walk", advance=1 if self.label else 0)
            self.label = label
        self.p.update("walk", description=f"walk {label}", advance=0,
                      note=f"steps {self.steps} · rejected {self.rejected} · {_counts(self.counts)}",
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
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A run configuration (pipelines/mine.toml): paths, proposers and limits.")
@click.option("--max-steps", type=int, default=None, help="Stop a lineage after this many accepted steps.")
@click.option("--max-rejections", type=int, default=None, help="Stop a lineage after this many rejected candidates.")
@click.option("--replay", is_flag=True, help="Use recorded evaluations (skills_db/evaluations) instead of a GPU.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@click.option("--model", default=None, help="Model id for --proposer llm (default claude-sonnet-4-5).")
@click.option("--base-url", default=None, help="An OpenAI-compatible server for --proposer llm.")
@click.option("--budget-usd", type=float, default=None, help="Dollars of model calls at most (--proposer llm).")
@click.option("--dry-run", is_flag=True,
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
        llm = _make_llm(("llm",), model, base_url, budget_usd, prompt_only)
        if prompt_only:
            from klineage.lineage.llm_proposer import LLMProposer
            from klineage.mechanisms import detect_all
            tgt = next(t for t in run.targets if t.proposer == "llm")
            src = read_source(tgt.start)
            _echo_preview(llm.preview(*LLMProposer(llm).prompt(src, detect_all(src), None)), as_json)
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
    store = _open_store(db_path)
    try:
        summary = _execute_mine(run, store, replay, quiet or as_json, llm=llm, executor=executor,
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


def _execute_mine(run, store, replay: bool, quiet: bool, llm=None, executor=None, build_stored: bool = False) -> dict:
    from klineage.gate.gate import Gate
    from klineage.lineage.mine import run_mine
    if replay:
        from klineage.store.recorded import import_recorded
        import_recorded(store)
    gate = Gate(store, run.gate_config(), build_stored=build_stored)
    progress = _MineProgress(quiet, len(run.targets))
    try:
        return run_mine(run, store, gate, replay=replay, progress=progress, llm=llm, executor=executor)
    finally:
        progress.done()
        gate.close()


@main.group("apply", invoke_without_command=True)
@click.option("--workload", "workload_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Workload folder of the new kernel (its workload.py).")
@click.option("--start", "start_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="The starting kernel (.cu) to make faster.")
@db_option(mode="extend")
@click.option("--materializer", "materializers", multiple=True, type=click.Choice(["rules", "sweep", "llm"]),
              help="Backends to use, in order (repeat the option; default: rules and sweep).")
@click.option("--budget-steps", type=int, default=16, show_default=True, help="Gate evaluations of candidates at most.")
@click.option("--budget-usd", type=float, default=None, help="Dollars of model calls at most (llm).")
@click.option("--budget-s", type=float, default=None, help="Wall-clock seconds at most.")
@click.option("--admission", type=click.Choice(["on", "off"]), default="on", show_default=True,
              help="Use only admitted skills (off: every skill, for ablation).")
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
@click.option("--dry-run", is_flag=True,
              help="Build and gate nothing, touch no GPU: print the retrieved skills and each backend's first "
                   "candidate (with llm: the exact prompt for the top skill and its cost estimate; sends nothing).")
@click.option("--replay", is_flag=True, help="Use recorded evaluations instead of a GPU.")
@arch_option
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write best.cu and trajectory.json here.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
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

    wl = load_workload(workload_dir)
    start = read_source(start_path)
    mats = tuple(materializers) or ("rules", "sweep")
    cfg = ApplyConfig(materializers=mats, budget_steps=budget_steps, budget_usd=budget_usd, budget_s=budget_s,
                      admission=admission == "on", model=model, sweep_axes=sweep_axes,
                      structural={"mode": "library"} if structural == "library" else None)
    llm = _make_llm(mats, model, base_url, budget_usd, dry_run)
    gate_config = None if arch is None else GateConfig(arch=arch)
    if dry_run:
        with _open_store(db_path) as store:
            plan = apply_plan(store.skills(), wl, start, cfg, llm, arch or DEFAULT_ARCH)
        click.echo(json.dumps(plan, indent=1, default=str) if as_json else format_apply_plan(plan))
        return
    store = _open_store(db_path)
    try:
        run = _execute_apply(store, wl, start, str(start_path), cfg, llm, replay, gate_config, quiet=quiet or as_json)
    finally:
        store.close()
    if out_dir:
        write_outputs(run, out_dir)
    if as_json:
        click.echo(json.dumps({k: v for k, v in run.items() if k != "best_source"}, indent=1, default=str))
    else:
        click.echo(format_apply_run(run))
    sys.exit(_apply_exit(run))


def _apply_exit(run: dict) -> int:
    """A run whose start kernel failed the gate failed (1); a replay that lacked records exits 4."""
    if run["stop_reason"] == "start_failed":
        return int(ExitCode.FAILED)
    return int(ExitCode.MISSING) if (run.get("summary") or {}).get("missing") else int(ExitCode.OK)


def apply_plan(skills: list[dict], wl, start: str, cfg, llm, arch: str) -> dict:
    """What `apply` would do first, with nothing gated and no GPU touched: the skills retrieved for
    the start kernel (its bottleneck unknown until it is measured), the excluded ones with their
    reasons, and per backend its first candidate: the rules rewrite of the top skill that has one,
    the sweep's first round of points, the llm's exact prompt for the top retrieved skill."""
    from klineage.apply.loop import retrieved_skills
    from klineage.apply.materialize import RulesMaterializer, contract_text, make_buildable, make_sweep
    from klineage.apply.retrieve import retrieve, target_facts
    if not skills:
        raise _bad_input("the library is empty: pass --db with a copy of skills_db/skills.duckdb, or mine first")
    facts = target_facts(wl, start, cfg.platform, None)
    got = retrieve(skills, facts, admission=cfg.admission)
    by_id = {s["skill_id"]: s for s in skills}
    plan = {"dry_run": True, "workload": wl.name, "materializers": list(cfg.materializers),
            "budget_steps": cfg.budget_steps, "arch": arch, "target": got["target"],
            "retrieved": [{"name": c["name"], "skill_id": c["skill_id"], "score": c["terms"]["score"]}
                          for c in got["candidates"]],
            "excluded": [{"name": e["name"], "reasons": e["reasons"]} for e in got["excluded"]], "first": {}}
    for backend in cfg.materializers:
        if backend == "rules":
            rules = RulesMaterializer()
            for c in got["candidates"]:
                cands = rules.propose(by_id[c["skill_id"]], start, wl)
                if cands:
                    plan["first"]["rules"] = {"skill": c["name"], "note": cands[0].note}
                    break
            else:
                plan["first"]["rules"] = {"skill": None, "note": "no retrieved skill has a rewrite that applies"}
        elif backend == "sweep":
            sweep = make_sweep(cfg.sweep, make_buildable(cfg.sweep_axes, arch))
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


def format_apply_plan(plan: dict) -> str:
    lines = [f"dry run on {plan['workload']} ({plan['arch']}): nothing is gated and no GPU touched; the start kernel's "
             f"bottleneck is unknown until it is measured"]
    lines.append(table(["rank", "retrieved skill", "score"],
                       [[i + 1, c["name"], f"{c['score']:.2f}"] for i, c in enumerate(plan["retrieved"])],
                       right=("rank", "score")) if plan["retrieved"] else "no skill retrieved")
    lines.append(f"excluded: {len(plan['excluded'])} skills (`--json` lists each with its reasons)")
    for backend, first in plan["first"].items():
        if backend == "sweep":
            pts = "; ".join(",".join(f"{k}={v}" for k, v in p.items()) for p in first["points"]) or "none"
            lines.append(f"sweep, first round: {pts}")
        else:
            lines.append(f"{backend}, first candidate: {first['skill'] or '-'}" + (f" ({first['note']})" if first.get("note") else ""))
    if "prompt" in plan:
        lines.append(f"llm prompt for {plan['first']['llm']['skill']}:\n{plan['prompt']}\n\n-- estimate: "
                     f"{json.dumps(plan['estimate'])}")
    return "\n".join(lines)


def _echo_preview(d: dict, as_json: bool) -> None:
    """A dry run's output: the exact prompt and the cost estimate (klineage.apply.llm.LLMMaterializer.preview)."""
    click.echo(json.dumps({"prompt": d["prompt"], "estimate": d["estimate"]}, indent=1) if as_json
               else f"{d['prompt']}\n\n-- estimate: {json.dumps(d['estimate'])}")


def _make_llm(mats, model, base_url, budget_usd, dry_run=False):
    """The llm materializer when asked for. Keys come from the environment only; a missing key
    raises here (MissingKeyError names the variable), before anything is stored."""
    if "llm" not in mats:
        return None
    from klineage.apply.llm import LLMMaterializer
    from klineage.llm import open_session
    return open_session(model, base_url, budget_usd, dry_run, kind=LLMMaterializer)


class _ApplyProgress:
    """Apply progress: candidate steps gated of the budget, steps kept, gate verdicts by status."""

    def __init__(self, quiet: bool, label: str, total: int | None):
        from klineage.progress import Progress
        self.p = Progress(quiet)
        self.counts: dict[str, int] = {}
        self.kept = 0
        self.p.task("apply", label, total=total)

    def __call__(self, step: dict) -> None:
        self.counts[step["status"]] = self.counts.get(step["status"], 0) + 1
        self.kept += bool(step["accepted"] and step["kind"] == "candidate")
        self.p.update("apply", advance=1 if step["kind"] == "candidate" else 0, say=step["kind"] != "candidate",
                      note=f"kept {self.kept} · {_counts(self.counts)}")

    def done(self):
        self.p.close()


def _execute_apply(store, wl, start: str, origin: str, cfg, llm, replay: bool, gate_config=None,
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
        return apply(store, gate, wl, start, origin, cfg, llm=llm, replay=replay, progress=progress)
    finally:
        progress.done()
        gate.close()


@main.command("run")
@click.argument("pipeline", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@db_option(mode="rebuild")
@click.option("--replay", is_flag=True, help="Use recorded evaluations instead of a GPU.")
@arch_option
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@json_option
@library_errors
def run_cmd(pipeline, db_path, replay, arch, quiet, as_json):
    """Execute a declarative pipeline (pipelines/NAME.toml: kind = mine | apply | heldout), validated strictly,
    and record it with its configuration in the database. Exits 1 when the run failed (an apply whose
    start kernel fails the gate), 4 when a replay lacked records."""
    import hashlib
    import time as _time

    from klineage.pipelines import load_pipeline
    from klineage.workload import load_workload

    pl = load_pipeline(pipeline)
    if arch is not None:
        if pl.kind == "heldout":
            raise _bad_input("--arch: the held-out pipeline's instances and records are sm_90a builds; "
                             "leave --arch out")
        if pl.kind == "mine":
            pl.run.arch = arch
    llm = None
    if pl.kind == "apply":
        ap = pl.run
        llm = _make_llm(ap.config.materializers, ap.config.model, ap.base_url, ap.config.budget_usd)
    store = _open_store(db_path)
    rid = hashlib.sha256(f"{pl.digest}|{replay}|{_time.time_ns()}".encode()).hexdigest()[:16]
    from datetime import datetime, timezone
    rec = {"run_id": rid, "name": pl.name, "kind": pl.kind, "path": str(pipeline), "config_hash": pl.digest,
           "config_text": pl.text, "replay": replay, "started_at": datetime.now(timezone.utc).replace(tzinfo=None)}
    store.put_pipeline_run(rec)
    outcome, result = "failed", None
    try:
        if pl.kind == "mine":
            result = _execute_mine(pl.run, store, replay, quiet or as_json)
            outcome = "missing" if result["missing"] else "ok"
        elif pl.kind == "heldout":
            result = _execute_heldout(store, pl.run, replay, quiet or as_json)
            outcome = "missing" if result["missing"] else "ok"
        else:
            from klineage.apply.loop import write_outputs
            from klineage.gate.gate import gate_config_for
            ap = pl.run
            if replay and ap.records:
                from klineage.errors import ReplayMissingError
                from klineage.store.recorded import import_paths
                absent = [display_path(r) for r in ap.records if not Path(r).exists()]
                if absent:
                    raise ReplayMissingError(
                        f"{pipeline}: apply.records {', '.join(absent)} is not there: record it by running this "
                        "pipeline on a GPU machine without --replay and exporting the workload's evaluations "
                        "(`klineage evals export`; benchmarks/apply_gelu_h200.sh does both for apply_gelu)")
                import_paths(store, ap.records)
            gcfg = gate_config_for(ap.gate)
            if arch is not None:
                gcfg = dataclasses.replace(gcfg, arch=arch)
            result = _execute_apply(store, load_workload(ap.workload), read_source(ap.start), str(ap.start), ap.config,
                                    llm, replay, gcfg, quiet=quiet or as_json)
            if ap.out:
                write_outputs(result, ap.out)
            outcome = "failed" if result["stop_reason"] == "start_failed" else "ok"
    finally:
        summary = None
        if result is not None:
            summary = ({k: v for k, v in result.items() if k not in ("lineages",)} if pl.kind == "mine"
                       else {"heldout_run": result["run_id"], "verdict": result["summary"]["verdict"]}
                       if pl.kind == "heldout"
                       else {"apply_run": result["run_id"], "stop_reason": result["stop_reason"]})
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
                          note=f"steps {self.steps} · {_counts(self.counts)}", say=True)
        else:
            r = kw["row"]
            self.p.update("heldout", advance=1, description=f"heldout {r['instance']} {r['condition']}: {r['status']}")

    def done(self):
        self.p.close()


def _split(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def _execute_heldout(store, hp, replay: bool, quiet: bool, families=None, names=None) -> dict:
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
        recorded = recorded_report(hp.records)
        if recorded is not None and {i["instance"] for i in recorded["instances"]} == {i.name for i in instances}:
            chk = replay_check(recorded, report)
            if hp.out is not None:
                Path(hp.out, "replay_check.json").write_text(json.dumps(chk, indent=1, sort_keys=True) + "\n")
            click.echo(format_replay_check(chk), err=True)
    return report


@main.command("heldout")
@click.argument("root", required=False, type=click.Path(file_okay=False, path_type=Path))
@db_option(mode="create")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A held-out pipeline (pipelines/heldout.toml): its [heldout] and [gate] tables; options given "
                   "here override it.")
@click.option("--conditions", default=None,
              help="Comma-separated conditions (default all): idiom, skills, control-random, control-foreign, llm.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
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
@click.option("--dry-run", is_flag=True,
              help="Print the plan (instances, starts, tunables, references, foreign libraries, the first sweep "
                   "round of each searching condition); evaluate nothing.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
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
    store = _open_store(db_path)
    try:
        if dry_run:
            from klineage.heldout import load_instances
            from klineage.heldout.run import llm_status, plan
            from klineage.store.recorded import load_front_end
            load_front_end(hp.records, replay=replay)
            reason = llm_status(replay, hp.config.model, hp.config.budget_usd)[1] if "llm" in hp.config.conditions else None
            p = plan(load_instances(hp.root, _split(families), _split(names)), hp.config, store, reason)
            click.echo(json.dumps(p, indent=1) if as_json else _format_plan(p))
            return
        if hp.out is None:
            raise click.UsageError("give --out DIR (or a --config whose [heldout] table names out)")
        report = _execute_heldout(store, hp, replay, quiet or as_json, _split(families), _split(names))
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
    lines = [f"conditions {', '.join(p['conditions'])}; budget {p['config']['budget']}; final rounds "
             f"{p['config']['final_rounds']}; library {p['library']['skills']} skills; llm: {p['llm']}"]
    for fam, names in p["library"]["foreign"].items():
        lines.append(f"  foreign library for {fam}: {len(names)} skills {', '.join(names)[:200]}")
    for i in p["instances"]:
        lines.append(f"  {i['family']:<10} {i['instance']:<24} starts {i['starts']} tunables {i['tunables']} "
                     f"reference {i['reference']}" + (f" (fallback: {i['fallback']})" if i["fallback"] else ""))
        if i.get("sweep_space"):
            lines.append(f"      sweep axes ({p['config'].get('sweep_axes', 'source')}): " + "; ".join(
                f"{k} {'/'.join(str(v) for v in vals)}" for k, vals in i["sweep_space"].items()))
        for cond, names in i.get("structural_path", {}).items():
            lines.append(f"      structural rewrites, {cond} (each on the last, if kept): {', '.join(names) or 'none'}")
        for cond, pts in i.get("first_sweep_round", {}).items():
            lines.append(f"      first sweep round, {cond} ({', '.join(pts[0]) if pts else 'no points'}): " + "; ".join(
                ",".join(str(v) for v in p.values()) for p in pts))
    return "\n".join(lines)


@apply_cmd.command("list")
@db_option
@json_option
@library_errors
def apply_list(db_path, as_json):
    """List stored apply runs: id, workload, stop reason, skills kept."""
    with _open_store(db_path) as store:
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
        rows.append([r["run_id"], r["workload"], r["stop_reason"], len(kept), _clip(", ".join(kept), 80)])
    click.echo(table(["run", "workload", "stop", "kept", "skills kept"], rows, right=("kept",)))


@apply_cmd.command("show")
@click.argument("run_id")
@db_option
@json_option
@library_errors
def apply_show(run_id, db_path, as_json):
    """Replay a stored apply trajectory (RUN: a run id or its prefix)."""
    with _open_store(db_path) as store:
        run = store.get_apply_run(run_id)
        if run is None:
            ids = ", ".join(r["run_id"] for r in store.apply_runs()[:10]) or "none stored"
            raise _bad_input(f"no single apply run {run_id!r} in {store.path} (runs: {ids})")
    click.echo(json.dumps(run, indent=1, default=str) if as_json else format_apply_run(run))


def format_apply_run(run: dict) -> str:
    summ = run.get("summary") or {}
    lines = [f"apply run {run['run_id']} on {run['workload']}: stop {run.get('stop_reason')}; "
             f"kept {summ.get('kept', [])}"]
    for c in summ.get("speedup_vs_start", []):
        shape = ",".join(f"{k}={v}" for k, v in sorted(c["shape"].items()))
        lines.append(f"  {shape}: {c['start_us']:.1f} us -> {c['best_us']:.1f} us ({c['speedup']:.2f}x)")
    for st in run.get("steps", []):
        what = st.get("skill") or (f"sweep {st.get('config')}" if st["backend"] == "sweep" else st["backend"])
        mark = "kept" if st["accepted"] and st["kind"] == "candidate" else ""
        lines.append(f"  [{st['seq']:2d}] {st['backend']:6s} {what:44s} {st['status']:18s} {mark} {st.get('note', '')[:80]}")
    for e in summ.get("excluded", [])[:12]:
        lines.append(f"  excluded {e['name']}: {'; '.join(e['reasons'])[:160]}")
    return "\n".join(lines)


@main.command("report")
@db_option
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for the static site (index.html, lineage/, skill/, heldout.html).")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@json_option
@library_errors
def report_cmd(db_path, out_dir, quiet, as_json):
    """Write a static HTML report of the library: workloads and skills, a latency chart and diffs per
    lineage, the full card per skill, the held-out results. No server needed; works offline."""
    from klineage.report import render_report
    with _open_store(db_path) as store:
        if not store.lineages() and not store.skills():
            raise _bad_input(f"{store.path} holds no lineages or skills: mine first, or pass --db "
                                       "skills_db/skills.duckdb")
        from klineage.progress import Progress
        with Progress(quiet or as_json) as progress:
            progress.task("report", f"report to {out_dir}")
            paths = render_report(store, out_dir, progress=lambda done, total: progress.set("report", done, total))
    if as_json:
        click.echo(json.dumps({k: [str(x) for x in v] if isinstance(v, list) else str(v) for k, v in paths.items()},
                              indent=1))
    else:
        click.echo(f"wrote {out_dir / 'index.html'}: {len(paths['lineages'])} lineage pages, "
                   f"{len(paths['skills'])} skill pages, {len(paths['charts'])} charts")


@main.group("baseline")
def baseline_group():
    """Run the published baselines (none, adaexplore, accelopt, expert-source) in this harness."""


@baseline_group.command("run")
@click.option("--method", type=click.Choice(["none", "adaexplore", "accelopt", "expert-source"]), required=True,
              help="The baseline to run.")
@click.option("--workload", "workload_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True,
              help="Workload folder (its workload.py).")
@click.option("--start", "start_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="The starting kernel (.cu).")
@click.option("--budget-usd", type=float, required=True, help="Dollars of model calls at most.")
@click.option("--max-iters", type=int, default=20, show_default=True, help="Model calls at most.")
@click.option("--budget-s", type=float, default=None, help="Wall-clock seconds at most.")
@click.option("--model", default=None, help="Model id (default claude-sonnet-4-5).")
@click.option("--base-url", default=None, help="An OpenAI-compatible server instead of the Anthropic API.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of adaexplore's tree search.")
@click.option("--dry-run", is_flag=True, help="Print the first prompt and its cost estimate; send nothing.")
@click.option("--replay", is_flag=True, help="Use recorded evaluations instead of a GPU.")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
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
    llm = _make_llm(("llm",), model, base_url, budget_usd, dry_run)
    if dry_run:
        _echo_preview(llm.preview(*Baseline(method, llm, seed).prompt(wl, start, None,
                                                                      "edit" if method == "adaexplore" else None)), as_json)
        return
    from klineage.gate.gate import GateConfig
    gate_config = None
    if config_path is not None:
        from klineage.lineage.mine import load_config
        gate_config = load_config(config_path)[0].gate_config()
    if arch is not None:
        gate_config = dataclasses.replace(gate_config or GateConfig(), arch=arch)
    store = _open_store(db_path)
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


@main.group("lineage")
def lineage_group():
    """Inspect stored lineages."""


@lineage_group.command("list")
@db_option
@json_option
@library_errors
def lineage_list(db_path, as_json):
    """List lineages: workload, proposer, steps, rejections, termination."""
    with _open_store(db_path) as store:
        lins = store.lineages()
    if as_json:
        click.echo(json.dumps([{k: l[k] for k in ("lineage_id", "workload_name", "proposer", "termination",
                                                   "remaining")} | {"steps": len(l["transitions"]),
                                                                    "rejections": len(l["rejections"])}
                               for l in lins], indent=1))
    elif not lins:
        click.echo(f"no lineages in {store.path}: mine first (klineage mine --config pipelines/mine.toml --replay)")
    else:
        click.echo(format_lineages_table(lins))


@lineage_group.command("show")
@click.argument("ident")
@db_option
@json_option
@library_errors
def lineage_show(ident, db_path, as_json):
    """Show one lineage (id prefix, or WORKLOAD/PROPOSER): states, steps, rejections."""
    with _open_store(db_path) as store:
        lin = store.get_lineage(ident)
    if lin is None:
        raise _bad_input(f"no single lineage matches {ident!r}: see `klineage lineage list`")
    click.echo(json.dumps(lin, indent=1) if as_json else format_lineage(lin))


@main.group("skills")
def skills_group():
    """Inspect and export the skill library."""


@skills_group.command("list")
@db_option
@json_option
@library_errors
def skills_list(db_path, as_json):
    """List skills with their median measured speedup."""
    with _open_store(db_path) as store:
        skills = store.skills()
    if as_json:
        click.echo(json.dumps([s["card"] for s in skills], indent=1))
    elif not skills:
        click.echo(f"no skills in {store.path}: mine first (klineage mine --config pipelines/mine.toml --replay)")
    else:
        click.echo(format_skills_table(skills))


@skills_group.command("show")
@click.argument("ident")
@db_option
@json_option
@library_errors
def skills_show(ident, db_path, as_json):
    """Show one skill card. IDENT: a name (wgmma/warpgroup-mma), an id or its prefix, or a name or
    mechanism prefix (wgmma) that only one skill has; an ambiguous IDENT lists the candidates."""
    with _open_store(db_path) as store:
        s = _find_skill(store, ident)
    click.echo(json.dumps(s["card"], indent=1) if as_json else s["card_md"])


def _find_skill(store, ident: str) -> dict:
    """The one skill IDENT names (exact name or id, else an id, name or mechanism prefix); exit 2
    naming the candidates when none or several match."""
    skills = store.skills()
    key = ident.lower()
    for pick in (lambda s: key in (s["name"].lower(), s["skill_id"].lower()),
                 lambda s: s["skill_id"].lower().startswith(key) or s["name"].lower().startswith(key)
                 or s["mechanism"].lower().startswith(key)):
        hits = [s for s in skills if pick(s)]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            names = "\n".join(f"  {s['name']}  ({s['skill_id']})" for s in hits)
            raise _bad_input(f"{ident!r} matches {len(hits)} skills; name one of them:\n{names}")
    raise _bad_input(f"no skill matches {ident!r} in {store.path}: see `klineage skills list` (a name such as "
                     "wgmma/warpgroup-mma, an id prefix, or a mechanism such as wgmma)")


@skills_group.command("why")
@click.argument("ident")
@db_option
@json_option
@library_errors
def skills_why(ident, db_path, as_json):
    """Every precondition and risk of one skill, with the probe, source line or record behind it."""
    from klineage.report.text import format_skill_why, skill_why
    with _open_store(db_path) as store:
        s = _find_skill(store, ident)
    why = skill_why(s["card"])
    click.echo(json.dumps(why, indent=1) if as_json else format_skill_why(why))


@skills_group.command("stats")
@db_option
@json_option
@library_errors
def skills_stats(db_path, as_json):
    """Library counts: skills by admission status, the admission rate, evidence kinds."""
    from klineage.report.text import format_skill_stats, skill_stats
    with _open_store(db_path) as store:
        st = skill_stats([s["card"] for s in store.skills()])
    click.echo(json.dumps(st, indent=1) if as_json else format_skill_stats(st))


@skills_group.command("export")
@db_option
@click.option("--format", "fmt", type=click.Choice(["skill-md", "jsonl", "parquet"]), default="skill-md", show_default=True,
              help="skill-md: a SKILL.md folder per skill; jsonl: one card per line; parquet: one row per skill.")
@click.option("--out", "out", type=click.Path(path_type=Path), required=True,
              help="Output folder (skill-md) or file (jsonl, parquet).")
@click.option("--force", is_flag=True, help="Replace what is already at --out (skill-md: the skills' folders).")
@library_errors
def skills_export(db_path, fmt, out, force):
    """Export the library: one SKILL.md folder per skill (Agent Skills layout), JSON lines (one card
    per line), or Parquet (one row per skill: id, name, mechanism, median speedup, admission status,
    risks, the card as JSON and as markdown)."""
    folder = fmt == "skill-md"
    if out.exists() and out.is_dir() != folder:
        raise _bad_input(f"--out {out} is a {'file' if folder else 'folder'}: {fmt} writes a "
                         f"{'folder' if folder else 'file'}; pass another path")
    if out.exists() and not force and (not folder or any(out.iterdir())):
        raise _bad_input(f"--out {out} already exists: pass --force to replace it, or another path")
    with _open_store(db_path) as store:
        skills = store.skills()
    if fmt == "skill-md":
        from klineage.report.skill_md import export_skill_md
        paths = export_skill_md(skills, out)
        click.echo(f"wrote {len(paths)} skills under {out}")
    elif fmt == "parquet":
        from klineage.store.export import write_parquet
        click.echo(f"wrote {write_parquet(skills, out)} skills to {out}")
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w") as f:
            for s in skills:
                f.write(json.dumps(s["card"], sort_keys=True) + "\n")
        click.echo(f"wrote {len(skills)} skills to {out}")


if __name__ == "__main__":  # python -m klineage.cli ... (every command is registered above)
    main()
