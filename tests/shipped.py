"""What the shipped library is mined from, for tests that check it."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def shipped_workload_dirs() -> list[Path]:
    """The workload folders of pipelines/mine.toml's targets (experts not yet recorded on a GPU,
    such as the tensor-core corpus of pipelines/mine_tensorcore.toml, are not among them)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from corpus_table import corpus_dirs
    return corpus_dirs()
