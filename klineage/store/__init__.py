"""The storage room: kernels, workloads and evaluations in one DuckDB file.

Only this package imports duckdb; everything else talks to a ``Store``."""
from klineage.store.db import MissingDatabaseError, Store, open_store
from klineage.store.integrity import DamagedDatabaseError

__all__ = ["DamagedDatabaseError", "MissingDatabaseError", "Store", "open_store"]
