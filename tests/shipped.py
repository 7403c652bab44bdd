"""What the shipped library is mined from, for tests that check it."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def shipped_workload_dirs() -> list[Path]:
    """The workload folders of pipelines/mine.toml's targets: the whole corpus, parts 1 and 2."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from corpus_table import corpus_dirs
    return corpus_dirs()
