import shutil
import subprocess
from pathlib import Path

import pytest

from tests.library_guard import LibraryGuard

SHIPPED_LIBRARY = Path(__file__).resolve().parents[1] / "skills_db" / "skills.duckdb"


def _has_gpu() -> bool:
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=10).returncode == 0
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False


HAS_GPU = _has_gpu()
HAS_NVCC = shutil.which("nvcc") is not None


def pytest_configure(config):
    """No test run may change the shipped library's bytes: checked when the session ends."""
    config.pluginmanager.register(LibraryGuard(SHIPPED_LIBRARY), "shipped-library-guard")


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="no CUDA GPU on this machine")
    skip_nvcc = pytest.mark.skip(reason="nvcc not on PATH")
    for item in items:
        if "requires_cuda" in item.keywords and not HAS_GPU:
            item.add_marker(skip_gpu)
        if "nvcc" in item.keywords and not HAS_NVCC:
            item.add_marker(skip_nvcc)


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """Each test session gets its own build cache; tests never touch the user's."""
    home = tmp_path_factory.getbasetemp() / "klineage-home"
    monkeypatch.setenv("KLINEAGE_HOME", str(home))

