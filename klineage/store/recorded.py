"""Recorded evaluations shipped in the repo (skills_db/evaluations/*.jsonl.gz, or plain .jsonl), used by --replay."""
from __future__ import annotations

from pathlib import Path

from klineage import settings


def recorded_files(root: Path | None = None) -> list[Path]:
    d = Path(root or settings.recorded_dir())
    return sorted([*d.glob("*.jsonl"), *d.glob("*.jsonl.gz")]) if d.is_dir() else []


def import_recorded(store, root: Path | None = None) -> tuple[int, int]:
    """Import every shipped record file into `store` (idempotent); (inserted, skipped)."""
    return import_paths(store, [Path(root or settings.recorded_dir())])


def import_paths(store, paths) -> tuple[int, int]:
    """Import record files, or every record file of the folders among `paths`; (inserted, skipped).
    A path that does not exist is passed over (nothing recorded there yet)."""
    ins = skip = 0
    for p in map(Path, paths):
        files = recorded_files(p) if p.is_dir() else [p] if p.is_file() else []
        for f in files:
            i, s = store.import_evaluations(f)
            ins, skip = ins + i, skip + s
    return ins, skip


def load_front_end(paths, replay: bool = False) -> int:
    """Load the nvcc front-end answers recorded beside the records (`*.front_end.json.gz` files, or
    those of the folders among `paths`: klineage.gate.compile.load_front_end_answers); their count.
    They decide which sweep points a kernel builds, so a replay chooses the recorded run's axes on a
    machine without nvcc."""
    from klineage.gate.compile import FRONT_END_SUFFIX, load_front_end_answers
    n = 0
    for p in map(Path, paths):
        files = sorted(p.glob("*" + FRONT_END_SUFFIX)) if p.is_dir() else [p] if p.name.endswith(FRONT_END_SUFFIX) else []
        for f in files:
            n += load_front_end_answers(f, replay=replay)
    return n


def compiler_dir() -> Path:
    """The compiler evidence recorded with the corpus (skills_db/compiler/: PTX with line info and
    ptxas's report per kernel, *.ptx.jsonl.xz)."""
    return settings.recorded_dir().parent / "compiler"


def load_compiler_records(replay: bool = False, root: Path | None = None) -> int:
    """Load the recorded compiler evidence (klineage.gate.compile.load_ptx_records: in a replay always,
    else when this machine's nvcc made it); how many kernels it answers for."""
    from klineage.gate.compile import PTX_SUFFIX, load_ptx_records
    d = Path(root or compiler_dir())
    return sum(load_ptx_records(f, replay=replay) for f in sorted(d.glob("*" + PTX_SUFFIX))) if d.is_dir() else 0
