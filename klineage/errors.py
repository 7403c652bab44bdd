"""The library's error hierarchy; the CLI turns these into click.ClickException at the boundary."""


class KLineageError(Exception):
    """Base of every error the library raises on purpose; its message names the fix."""


class WorkloadError(KLineageError):
    """A workload file is missing, malformed or incomplete."""


class StoreError(KLineageError):
    """The database cannot be opened, migrated or written."""


class NoDeviceError(KLineageError):
    """A live evaluation was asked for on a machine with no CUDA device."""


class ReplayMissingError(KLineageError):
    """A replayed evaluation has no recorded measurement."""
