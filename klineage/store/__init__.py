"""The storage room: kernels, workloads and evaluations in one DuckDB file.

Only this package imports duckdb; everything else talks to a ``Store``."""
from klineage.store.db import Store, open_store

__all__ = ["Store", "open_store"]
