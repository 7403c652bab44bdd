"""The storage room: kernels, workloads and evaluations in one DuckDB file.

Only this package imports duckdb; everything else talks to a ``Store``."""
from klineage.store.db import MissingDatabaseError, Store, open_store

__all__ = ["MissingDatabaseError", "Store", "open_store"]
