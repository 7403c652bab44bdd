"""Environment settings, all under the KLINEAGE_ prefix."""
from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

# The corpus folders a wheel carries as package data under klineage/corpus/ (pyproject.toml maps them).
CORPUS = ("expert_kernels", "skills_db", "pipelines", "apply_workloads", "heldout")


def data_dir() -> Path:
    """Where KLineage keeps its caches: $KLINEAGE_HOME, else ~/.cache/klineage."""
    return Path(os.environ.get("KLINEAGE_HOME") or Path.home() / ".cache" / "klineage")


def build_cache_dir() -> Path:
    return Path(os.environ.get("KLINEAGE_BUILD_CACHE") or data_dir() / "builds")


def default_db() -> Path:
    return Path(os.environ.get("KLINEAGE_DB") or "klineage.duckdb")


def repo_root() -> Path:
    """Where the corpus lives (expert_kernels/, skills_db/, pipelines/, apply_workloads/, heldout/):
    $KLINEAGE_ROOT when set; else the corpus installed with the package (klineage/corpus/, in a
    wheel); else the source checkout the package runs from."""
    if os.environ.get("KLINEAGE_ROOT"):
        return Path(os.environ["KLINEAGE_ROOT"]).resolve()
    package = Path(str(resources.files("klineage"))).resolve()
    installed = package / "corpus"
    return installed if (installed / "skills_db").is_dir() else package.parent


def shipped_library() -> Path:
    """The skill library shipped with the source tree; only the commands that rebuild it write it."""
    return repo_root() / "skills_db" / "skills.duckdb"


def recorded_dir() -> Path:
    """Recorded evaluations shipped with the repo, used by --replay."""
    return Path(os.environ.get("KLINEAGE_RECORDED") or repo_root() / "skills_db" / "evaluations")


def expert_dir() -> Path:
    """The expert corpus (expert_kernels/); $KLINEAGE_EXPERTS points elsewhere (a fixed snapshot)."""
    return Path(os.environ.get("KLINEAGE_EXPERTS") or repo_root() / "expert_kernels")


def display_path(path) -> str:
    """`path` relative to the source tree when inside it (so records match across machines)."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(repo_root()))
    except ValueError:
        return str(p)
