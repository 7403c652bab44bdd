"""Workloads that share code through a package of their corpus folder: loading, and a content hash
that covers the shared files (a change there re-keys every evaluation, as one of workload.py does)."""
import hashlib
from pathlib import Path

from klineage.lineage.probe import probe_set, probe_workload
from klineage.workload import load_workload, shared_modules

ROOT = Path(__file__).resolve().parents[1]
ROW_SUM = (ROOT / "expert_kernels" / "row_sum" / "workload.py").read_text()

# row_sum's workload with its callables moved into a shared module (as heldout/heldout_ops does)
OPS = ROW_SUM.replace('NAME = "row_sum"', 'NAME = "row_sum_shared"') + '''

def define():
    return {k: v for k, v in globals().items() if not k.startswith("__") and k not in ("define", "NAME")}
'''
INSTANCE = '''"""An instance built on klineage_test_ops."""
from klineage_test_ops.rows import define

NAME = "row_sum_shared"
globals().update(define())
'''


def _corpus(tmp_path, pkg="klineage_test_ops"):
    root = tmp_path / "corpus"
    (root / pkg).mkdir(parents=True)
    (root / pkg / "__init__.py").write_text("")
    (root / pkg / "rows.py").write_text(OPS)
    (root / "inst").mkdir()
    (root / "inst" / "workload.py").write_text(INSTANCE)
    return root


def test_a_workload_importing_a_corpus_package_loads_and_hashes_it(tmp_path):
    root = _corpus(tmp_path)
    wl = load_workload(root / "inst")
    assert wl.name == "row_sum_shared" and wl.benchmark_cases
    files = shared_modules(root / "inst" / "workload.py")
    assert [f.relative_to(root).as_posix() for f in files] == ["klineage_test_ops/__init__.py",
                                                              "klineage_test_ops/rows.py"]
    plain = hashlib.sha256(INSTANCE.encode()).hexdigest()
    assert wl.content_hash != plain
    # the same text elsewhere hashes the same (paths count relative to the corpus folder) ...
    other = _corpus(tmp_path / "elsewhere")
    assert load_workload(other / "inst").content_hash == wl.content_hash
    # ... and an edit of the shared module changes the hash
    (other / "klineage_test_ops" / "rows.py").write_text(OPS + "\n# edited\n")
    assert load_workload(other / "inst").content_hash != wl.content_hash


def test_a_workload_of_installed_imports_only_hashes_its_own_text():
    p = ROOT / "expert_kernels" / "row_sum" / "workload.py"
    assert shared_modules(p) == []
    assert load_workload(p).content_hash == hashlib.sha256(p.read_bytes()).hexdigest()


def test_a_probe_workload_carries_the_shared_modules(tmp_path, monkeypatch):
    monkeypatch.setenv("KLINEAGE_HOME", str(tmp_path / "home"))
    root = _corpus(tmp_path)
    wl = load_workload(root / "inst")
    pw = probe_workload(wl, probe_set(wl))
    assert pw.benchmark_cases
    assert (Path(pw.path).parent.parent / "klineage_test_ops" / "rows.py").read_text() == OPS
    assert shared_modules(Path(pw.path))  # its hash covers them too
