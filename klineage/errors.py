"""The library's error hierarchy; the CLI turns these into click.ClickException at the boundary."""


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
    """A live evaluation was asked for on a machine with no CUDA device."""


class ReplayMissingError(KLineageError):
    """A replayed evaluation has no recorded measurement."""


class BudgetExhausted(KLineageError):
    """A spending budget (dollars of model calls) is used up; the run stops with that reason."""
