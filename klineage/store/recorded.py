"""Recorded evaluations shipped in the repo (skills_db/evaluations/*.jsonl.gz, or plain .jsonl), used by --replay."""
from __future__ import annotations

from pathlib import Path

from klineage import settings


def recorded_files(root: Path | None = None) -> list[Path]:
    d = Path(root or settings.recorded_dir())
    return sorted([*d.glob("*.jsonl"), *d.glob("*.jsonl.gz")]) if d.is_dir() else []


def import_recorded(store, root: Path | None = None) -> tuple[int, int]:
    """Import every shipped record file into `store` (idempotent); (inserted, skipped)."""
    ins = skip = 0
    for f in recorded_files(root):
        i, s = store.import_evaluations(f)
        ins, skip = ins + i, skip + s
    return ins, skip
