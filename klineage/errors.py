"""The library's error hierarchy; the CLI turns these into click.ClickException at the boundary."""


class KLineageError(Exception):
    """Base of every error the library raises on purpose; its message names the fix. `exit_code`
    is what the CLI exits with: 2 for bad input (a file, a path or a setting the user gave), 1 else."""
    exit_code = 1


class InputError(KLineageError):
    """Bad input the user gave: a file that cannot be read as what it should be."""
    exit_code = 2


def read_source(path) -> str:
    """A CUDA source file's text; InputError naming the file when it is missing, a folder, or not
    UTF-8 text (binary garbage)."""
    from pathlib import Path
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{p}: no such kernel file: pass an existing .cu file") from None
    except IsADirectoryError:
        raise InputError(f"{p} is a folder: pass a .cu kernel file") from None
    except OSError as e:
        raise InputError(f"{p}: cannot read ({e.strerror}): check the path and its permissions") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{p} is not UTF-8 text (byte {e.start}: {data[e.start]:#04x}): pass a CUDA source file") from None
    if "\x00" in text:
        raise InputError(f"{p} holds NUL bytes: it is binary, not a CUDA source file")
    return text


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
