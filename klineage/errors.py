"""The library's error hierarchy; the CLI turns these into click.ClickException at the boundary."""
import enum


class ExitCode(enum.IntEnum):
    """What every klineage command exits with (docs/cli.md holds this table)."""
    OK = 0
    FAILED = 1        # a kernel or a run failed (a start kernel that does not build, no GPU for a live run)
    BAD_INPUT = 2     # bad input: an option, a path, a file, a configuration, an unknown id
    VERDICT = 3       # gate: a verdict other than PASSED
    MISSING = 4       # a replay lacked recorded evaluations
    INTERRUPTED = 130  # Ctrl-C (SIGINT); what was decided before it is stored


EXIT_CODE_MEANING = {
    ExitCode.OK: "success",
    ExitCode.FAILED: "a kernel or a run failed (a start kernel that does not build, no GPU for a live "
                     "evaluation, an internal error)",
    ExitCode.BAD_INPUT: "bad input: an option, path, file, configuration or id the command cannot use; "
                        "the message names the fix",
    ExitCode.VERDICT: "`gate`: at least one kernel got a verdict other than PASSED",
    ExitCode.MISSING: "a replay lacked recorded evaluations (they are listed)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C); what was decided before is stored",
}


class KLineageError(Exception):
    """Base of every error the library raises on purpose; its message names the fix. `exit_code`
    is what the CLI exits with: 2 for bad input (a file, a path or a setting the user gave), 1 else."""
    exit_code = 1


class InputError(KLineageError):
    """Bad input the user gave: a file that cannot be read as what it should be."""
    exit_code = 2


def read_text_file(path, err=None, what: str = "a text file") -> str:
    """A file's UTF-8 text, or `err` (an error class, InputError by default) naming the file and the
    fix when it is missing, a folder, unreadable, or not UTF-8 text (binary garbage)."""
    from pathlib import Path
    err = err or InputError
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise err(f"{p}: no such file: pass {what}") from None
    except IsADirectoryError:
        raise err(f"{p} is a folder: pass {what}") from None
    except OSError as e:
        raise err(f"{p}: cannot read ({e.strerror}): check the path and its permissions") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise err(f"{p} is not UTF-8 text (byte {e.start}: {data[e.start]:#04x}): pass {what}") from None
    if "\x00" in text:
        raise err(f"{p} holds NUL bytes: it is binary, not {what}")
    return text


def read_source(path) -> str:
    """A CUDA source file's text (InputError naming the file otherwise)."""
    return read_text_file(path, InputError, "a CUDA source file (.cu)")


def read_toml(path, err, what: str = "a TOML pipeline file such as pipelines/mine.toml") -> tuple[str, dict]:
    """(text, table) of a TOML file; `err` naming the file and the problem otherwise."""
    import tomllib
    text = read_text_file(path, err, what)
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise err(f"{path} is not valid TOML ({e}): fix the file") from e


class WorkloadError(KLineageError):
    """A workload file is missing, malformed or incomplete."""
    exit_code = 2


class StoreError(KLineageError):
    """The database cannot be opened, migrated or written."""
    exit_code = 2


class NoDeviceError(KLineageError):
    """A live evaluation was asked for on a machine with no CUDA device. `partial` holds what was
    done before the stop (the guard's and the build's results, as dicts) when the gate got that far."""
    exit_code = ExitCode.FAILED

    def __init__(self, message: str, partial: dict | None = None):
        super().__init__(message)
        self.partial = partial or {}


class ReplayMissingError(KLineageError):
    """A replayed evaluation has no recorded measurement."""
    exit_code = ExitCode.MISSING


class BudgetExhausted(KLineageError):
    """A spending budget (dollars of model calls) is used up; the run stops with that reason."""
