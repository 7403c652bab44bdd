"""The klineage command line: parses options, calls the library, formats the output."""
from __future__ import annotations

import dataclasses
import functools
import json
import sys
from pathlib import Path

import click

from klineage import __version__, settings
from klineage.errors import KLineageError, read_source
from klineage.report.text import (format_gate_result, format_lineage, format_lineage_row, format_mine_summary,
                                  format_skill_row, format_workload)


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


def library_errors(fn):
    """Turn library errors into one-line click errors whose message names the fix (exit 2 for bad
    input, 1 otherwise); with --debug the traceback is shown instead."""
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            return fn(*a, **kw)
        except KLineageError as exc:
            if _DEBUG["on"]:
                raise
            err = click.ClickException(str(exc))
            err.exit_code = getattr(exc, "exit_code", 1)
            raise err from exc
    return wrapper


_DEBUG = {"on": False}


class _Main(click.Group):
    """The root group: an unexpected exception is one line (and exit 1) unless --debug is given."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except KLineageError as exc:
            if _DEBUG["on"]:
                raise
            err = click.ClickException(str(exc))
            err.exit_code = getattr(exc, "exit_code", 1)
            raise err from exc
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


@click.group(cls=_Main)
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
              help="Take the timing settings from a run configuration's [gate] table (e.g. pipelines/mine.toml).")
@json_option
@library_errors
def gate_cmd(kernels, workload_dir, db_path, replay, remeasure, shapes, config_path, as_json):
    """Guard, compile, check and time KERNEL.cu files against their workload."""
    from klineage.gate.gate import Gate, GateConfig
    from klineage.workload import find_workload_for, load_workload

    store = _open_store(db_path)
    if replay:
        from klineage.store.recorded import import_recorded
        import_recorded(store)
    cfg = GateConfig(shapes=shapes)
    if config_path is not None:
        from klineage.lineage.mine import load_config
        cfg = dataclasses.replace(load_config(config_path)[0].gate_config(), shapes=shapes)
    gate = Gate(store, cfg)
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
@library_errors
def evals_export(file, db_path):
    """Export every stored evaluation to a JSON Lines file."""
    with _open_store(db_path) as store:
        n = store.export_evaluations(file)
    click.echo(f"{n} evaluations written to {file}")


# -- mining ------------------------------------------------------------------------------------------

class _Progress:
    """One status line on stderr: evaluations by gate status, steps, rejections (unless quiet)."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.counts: dict[str, int] = {}
        self.steps = self.rejected = 0
        self.label = ""

    def _count(self, status: str) -> None:
        self.counts[status] = self.counts.get(status, 0) + 1

    def _show(self, head: str) -> None:
        if not self.quiet:
            st = " ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
            click.echo(f"\r[{self.label}] {head} · {st}\033[K", err=True, nl=False)

    def __call__(self, label, event, **kw):
        self.label = label
        if event == "evaluated":
            self._count(kw["status"])
        elif event == "step":
            self.steps += 1
        elif event == "rejected":
            self.rejected += 1
        elif event == "missing":
            self._count("NOT_REPLAYED")
        self._show(f"steps {self.steps} · rejected {self.rejected}")

    def done(self):
        if not self.quiet and self.label:
            click.echo("", err=True)


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
@click.option("--quiet", is_flag=True, help="No progress line.")
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
@json_option
@library_errors
def mine_cmd(paths, db_path, proposer, config_path, max_steps, max_rejections, replay, quiet, model, base_url,
             budget_usd, dry_run, prompt_only, executor_name, ray_address, check_builds, as_json):
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
        progress = _Progress(quiet or as_json)
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
        sys.exit(4)


def _execute_mine(run, store, replay: bool, quiet: bool, llm=None, executor=None, build_stored: bool = False) -> dict:
    from klineage.gate.gate import Gate
    from klineage.lineage.mine import run_mine
    if replay:
        from klineage.store.recorded import import_recorded
        import_recorded(store)
    gate = Gate(store, run.gate_config(), build_stored=build_stored)
    progress = _Progress(quiet)
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
@click.option("--dry-run", is_flag=True, help="With llm: print the exact first prompt and its cost estimate; send nothing.")
@click.option("--replay", is_flag=True, help="Use recorded evaluations instead of a GPU.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write best.cu and trajectory.json here.")
@click.option("--quiet", is_flag=True, help="No progress line.")
@json_option
@click.pass_context
@library_errors
def apply_cmd(ctx, workload_dir, start_path, db_path, materializers, budget_steps, budget_usd, budget_s, admission,
              sweep_axes, structural, model, base_url, dry_run, replay, out_dir, quiet, as_json):
    """Retrieve skills for a new kernel and apply them one at a time behind the gate.

    \b
    klineage apply --workload DIR --start KERNEL.cu [--materializer rules|sweep|llm ...] [--out DIR]
    klineage apply show RUN        replay a stored trajectory
    """
    if ctx.invoked_subcommand is not None:
        return
    if workload_dir is None or start_path is None:
        raise click.UsageError("give --workload DIR and --start KERNEL.cu (or: klineage apply show RUN)")
    from klineage.apply.loop import ApplyConfig, write_outputs
    from klineage.workload import load_workload

    wl = load_workload(workload_dir)
    start = read_source(start_path)
    mats = tuple(materializers) or ("rules", "sweep")
    cfg = ApplyConfig(materializers=mats, budget_steps=budget_steps, budget_usd=budget_usd, budget_s=budget_s,
                      admission=admission == "on", model=model, sweep_axes=sweep_axes,
                      structural={"mode": "library"} if structural == "library" else None)
    llm = _make_llm(mats, model, base_url, budget_usd, dry_run)
    if llm is not None:
        if dry_run:
            from klineage.apply.materialize import contract_text
            with _open_store(db_path) as store:
                skills = store.skills()
            if not skills:
                raise click.ClickException("the library is empty: mine first (klineage mine ...) or pass --db")
            _echo_preview(llm.dry_run([skills[0]["card_md"]], start, contract_text(wl), None), as_json)
            return
    store = _open_store(db_path)
    try:
        run = _execute_apply(store, wl, start, str(start_path), cfg, llm, replay, quiet=quiet or as_json)
    finally:
        store.close()
    if out_dir:
        write_outputs(run, out_dir)
    if as_json:
        click.echo(json.dumps({k: v for k, v in run.items() if k != "best_source"}, indent=1, default=str))
    else:
        click.echo(format_apply_run(run))


def _echo_preview(d: dict, as_json: bool) -> None:
    """A dry run's output: the exact prompt and the cost estimate (klineage.apply.llm.LLMMaterializer.preview)."""
    click.echo(json.dumps({"prompt": d["prompt"], "estimate": d["estimate"]}, indent=1) if as_json
               else f"{d['prompt']}\n\n-- estimate: {json.dumps(d['estimate'])}")


def _make_llm(mats, model, base_url, budget_usd, dry_run=False):
    """The llm materializer when asked for. Keys come from the environment only; a missing key
    raises here (MissingKeyError names the variable), before anything is stored."""
    if "llm" not in mats:
        return None
    from klineage.apply import llm as llm_mod
    backend = None
    if not dry_run:
        backend = (llm_mod.OpenAICompatBackend(base_url, model or llm_mod.DEFAULT_MODEL) if base_url
                   else llm_mod.AnthropicBackend(model or llm_mod.DEFAULT_MODEL))
    return llm_mod.LLMMaterializer(backend, budget_usd=budget_usd, model=model)


class _ApplyProgress(_Progress):
    """The same status line for apply: steps, steps kept, and counts per gate status."""

    def __init__(self, quiet: bool, label: str):
        super().__init__(quiet)
        self.label, self.kept = label, 0

    def __call__(self, step: dict) -> None:
        self.steps += 1
        self._count(step["status"])
        self.kept += bool(step["accepted"] and step["kind"] == "candidate")
        self._show(f"steps {self.steps} · kept {self.kept}")


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
    progress = _ApplyProgress(quiet, f"apply {wl.name}")
    try:
        return apply(store, gate, wl, start, origin, cfg, llm=llm, replay=replay, progress=progress)
    finally:
        progress.done()
        gate.close()


@main.command("run")
@click.argument("pipeline", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@db_option(mode="rebuild")
@click.option("--replay", is_flag=True, help="Use recorded evaluations instead of a GPU.")
@click.option("--quiet", is_flag=True, help="No progress line.")
@json_option
@library_errors
def run_cmd(pipeline, db_path, replay, quiet, as_json):
    """Execute a declarative pipeline (pipelines/NAME.toml: kind = mine | apply | heldout), validated strictly,
    and record it with its configuration in the database."""
    import hashlib
    import time as _time

    from klineage.pipelines import load_pipeline
    from klineage.workload import load_workload

    pl = load_pipeline(pipeline)
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
            from klineage.gate.gate import GateConfig
            from klineage.lineage.mine import MineRun
            ap = pl.run
            gcfg = MineRun([], timing=ap.gate).gate_config() if ap.gate else GateConfig()
            result = _execute_apply(store, load_workload(ap.workload), read_source(ap.start), str(ap.start), ap.config,
                                    llm, replay, gcfg, quiet=quiet or as_json)
            if ap.out:
                write_outputs(result, ap.out)
            outcome = "ok"
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
    if outcome == "missing":
        sys.exit(4)


# -- the held-out check -------------------------------------------------------------------------------

class _HeldoutProgress(_Progress):
    """The status line for heldout: the instance and condition at work, steps, rows decided."""

    def __init__(self, quiet: bool):
        super().__init__(quiet)
        self.rows = 0

    def __call__(self, event: str, **kw) -> None:
        if event == "step":
            self.steps += 1
            self._count(kw["step"]["status"])
            self.label = f"heldout {kw['instance']} {kw['condition']}"
        else:
            self.rows += 1
            self.label = f"heldout {kw['row']['instance']} {kw['row']['condition']}: {kw['row']['status']}"
        self._show(f"steps {self.steps} · rows {self.rows}")


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
    progress = _HeldoutProgress(quiet)
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
@click.option("--quiet", is_flag=True, help="No progress line.")
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
        sys.exit(4)


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
    for r in runs:
        kept = (r.get("summary") or {}).get("kept", [])
        click.echo(f"{r['run_id']}  {r['workload']:16s} {str(r['stop_reason']):14s} kept {len(kept)}: {', '.join(kept)[:80]}")


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
            raise click.ClickException(f"no single apply run {run_id!r} in {store.path} (runs: {ids})")
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
@json_option
@library_errors
def report_cmd(db_path, out_dir, as_json):
    """Write a static HTML report of the library: workloads and skills, a latency chart and diffs per
    lineage, the full card per skill, the held-out results. No server needed; works offline."""
    from klineage.report import render_report
    with _open_store(db_path) as store:
        if not store.lineages() and not store.skills():
            raise click.ClickException(f"{store.path} holds no lineages or skills: mine first, or pass --db "
                                       "skills_db/skills.duckdb")
        paths = render_report(store, out_dir)
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
@db_option(mode="create")
@json_option
@library_errors
def baseline_run(method, workload_dir, start_path, budget_usd, max_iters, budget_s, model, base_url, seed, dry_run,
                 replay, config_path, db_path, as_json):
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
    gate_config = None
    if config_path is not None:
        from klineage.lineage.mine import load_config
        gate_config = load_config(config_path)[0].gate_config()
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
        sys.exit(4)


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
    else:
        for l in lins:
            click.echo(format_lineage_row(l))


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
        raise click.ClickException(f"no single lineage matches {ident!r}: see `klineage lineage list`")
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
    else:
        for s in skills:
            click.echo(format_skill_row(s))


@skills_group.command("show")
@click.argument("ident")
@db_option
@json_option
@library_errors
def skills_show(ident, db_path, as_json):
    """Show one skill card (id prefix or name)."""
    with _open_store(db_path) as store:
        s = store.get_skill(ident)
    if s is None:
        raise click.ClickException(f"no single skill matches {ident!r}: see `klineage skills list`")
    click.echo(json.dumps(s["card"], indent=1) if as_json else s["card_md"])


@skills_group.command("why")
@click.argument("ident")
@db_option
@json_option
@library_errors
def skills_why(ident, db_path, as_json):
    """Every precondition and risk of one skill, with the probe, source line or record behind it."""
    from klineage.report.text import format_skill_why, skill_why
    with _open_store(db_path) as store:
        s = store.get_skill(ident)
    if s is None:
        raise click.ClickException(f"no single skill matches {ident!r}: see `klineage skills list`")
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
@library_errors
def skills_export(db_path, fmt, out):
    """Export the library: one SKILL.md folder per skill (Agent Skills layout), JSON lines (one card
    per line), or Parquet (one row per skill: id, name, mechanism, median speedup, admission status,
    risks, the card as JSON and as markdown)."""
    with _open_store(db_path) as store:
        skills = store.skills()
    if fmt == "skill-md":
        from klineage.report.skill_md import export_skill_md
        paths = export_skill_md(skills, out)
        click.echo(f"wrote {len(paths)} skills under {out}")
    elif fmt == "parquet":
        import duckdb
        out.parent.mkdir(parents=True, exist_ok=True)
        con = duckdb.connect()
        con.execute("CREATE TABLE s (skill_id TEXT, name TEXT, mechanism TEXT, median_speedup DOUBLE, "
                    "admission TEXT, risks INTEGER, card_json TEXT, card_md TEXT)")
        for s in skills:
            c = s["card"]
            con.execute("INSERT INTO s VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [s["skill_id"], s["name"], s["mechanism"], (c.get("effects") or {}).get("median_speedup"),
                         (c.get("admission") or {}).get("status"), len(c.get("risks") or []),
                         json.dumps(c, sort_keys=True), s["card_md"]])
        tmp = out.with_name(out.name + ".tmp")
        con.execute(f"COPY s TO '{tmp.as_posix()}' (FORMAT PARQUET)")
        con.close()
        tmp.replace(out)
        click.echo(f"wrote {len(skills)} skills to {out}")
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w") as f:
            for s in skills:
                f.write(json.dumps(s["card"], sort_keys=True) + "\n")
        click.echo(f"wrote {len(skills)} skills to {out}")


if __name__ == "__main__":  # python -m klineage.cli ... (every command is registered above)
    main()
