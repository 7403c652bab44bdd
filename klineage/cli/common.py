"""What every command shares: the root group `main`, the shared options, error conversion, opening
the database, the llm client."""
from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import click

from klineage import __version__, settings
from klineage.errors import EXIT_CODE_MEANING, ExitCode, KLineageError


class ShippedPath(click.Path):
    """A file path; one that is not there is looked up in the corpus (settings.repo_root(): the
    checkout, or the corpus installed with the package), so `pipelines/mine.toml` runs from any folder."""

    def __init__(self):
        super().__init__(exists=True, dir_okay=False, path_type=Path)

    def convert(self, value, param, ctx):
        if not Path(value).exists() and (settings.repo_root() / value).is_file():
            value = settings.repo_root() / value
        return super().convert(value, param, ctx)


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
    that write ("create" or "extend"). The command receives a DbTarget for open_db."""
    def deco(f):
        return click.option("-d", "--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                            callback=lambda _ctx, _param, value: DbTarget(value, mode), help=_DB_HELP[mode])(f)
    return deco(fn) if fn is not None else deco


def arch_option(fn=None, *, default: str | None = None, help: str | None = None):
    """The shared --arch option: a build target nvcc 13 knows (klineage.gate.compile.ARCHS), the same
    list for every command; `@arch_option` (default: the configuration's, else sm_90a) or
    `@arch_option(default=..., help=...)`."""
    from klineage.gate.compile import ARCHS
    text = help or ("Build target of the GPU in hand (default: the configuration's [gate] arch, else sm_90a, Hopper; "
                    "kernels using wgmma build for sm_90a only).")

    def deco(f):
        return click.option("--arch", type=click.Choice(ARCHS), default=default, show_default=default is not None,
                            help=text)(f)
    return deco(fn) if fn is not None else deco


def clip(text: str, n: int) -> str:
    text = str(text)
    return text if len(text) <= n else text[:n - 3] + "..."


def bad_input(message: str) -> click.ClickException:
    """A one-line error for input the command cannot use (exit 2)."""
    err = click.ClickException(message)
    err.exit_code = int(ExitCode.BAD_INPUT)
    return err


def usage_error(exc: KLineageError) -> click.ClickException:
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
            raise usage_error(exc) from exc
    return wrapper


_DEBUG = {"on": False}


def reads_library(fn):
    """A command that reads a library: --db (read-only), --json, and library errors as one-line
    click errors."""
    return db_option(json_option(library_errors(fn)))


class _Main(click.Group):
    """The root group: an unexpected exception is one line (and exit 1) unless --debug is given;
    Ctrl-C exits 130. Under --json an error is a JSON object on stdout ({"error", "exit_code",
    "kind"}), with the same exit code."""

    def parse_args(self, ctx, args):
        ctx.meta["klineage.json"] = "--json" in args
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        try:
            return self._invoke(ctx)
        except click.ClickException as exc:
            if not ctx.meta.get("klineage.json"):
                raise
            click.echo(json.dumps({"error": exc.format_message(), "exit_code": exc.exit_code,
                                   "kind": type(exc.__cause__ or exc).__name__}, indent=1))
            raise click.exceptions.Exit(exc.exit_code) from None

    def _invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            from klineage.store.writer import written
            dbs = written()
            text = (f"interrupted: what was decided before is stored in {', '.join(map(str, dbs))}; run the command "
                    "again to continue" if dbs else "interrupted: nothing was written")
            if ctx.meta.get("klineage.json"):
                click.echo(json.dumps({"error": text, "exit_code": int(ExitCode.INTERRUPTED), "kind": "Interrupted"}))
            click.echo(text, err=True)
            raise click.exceptions.Exit(ExitCode.INTERRUPTED) from None
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except KLineageError as exc:
            if _DEBUG["on"]:
                raise
            raise usage_error(exc) from exc
        except Exception as exc:
            if _DEBUG["on"]:
                raise
            raise click.ClickException(f"internal error: {type(exc).__name__}: {exc} "
                                       "(run again with --debug for the traceback, and report it)") from exc


def open_db(db: DbTarget):
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
    except MissingDatabaseError as exc:
        if exc.held_by is not None:
            raise
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


def counts_text(counts: dict) -> str:
    return " ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def echo_preview(d: dict, as_json: bool) -> None:
    """A dry run's output: the exact prompt and the cost estimate (klineage.apply.llm.LLMMaterializer.preview)."""
    click.echo(json.dumps({"prompt": d["prompt"], "estimate": d["estimate"]}, indent=1) if as_json
               else f"{d['prompt']}\n\n-- estimate: {json.dumps(d['estimate'])}")


def make_llm(mats, model, base_url, budget_usd, dry_run=False):
    """The llm materializer when asked for. Keys come from the environment only; a missing key
    raises here (MissingKeyError names the variable), before anything is stored."""
    if "llm" not in mats:
        return None
    from klineage.apply.llm import LLMMaterializer
    from klineage.llm import open_session
    return open_session(model, base_url, budget_usd, dry_run, kind=LLMMaterializer)
