"""The klineage command line: parses options, calls the library, formats the output.

Every command exits with a code of klineage.errors.ExitCode (the table in docs/cli.md). One module per
command group; importing this package registers every command on `main`."""
from klineage.cli import apply, heldout, kernels, library, mine, run  # noqa: F401  (register the commands)
from klineage.cli.common import main

__all__ = ["main"]
