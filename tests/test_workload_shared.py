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


def test_the_llm_contract_shows_the_shared_modules(tmp_path):
    from klineage.apply.materialize import contract_text
    wl = load_workload(_corpus(tmp_path) / "inst")
    text = contract_text(wl)
    assert INSTANCE in text and "klineage_test_ops/rows.py (imported by workload.py)" in text
    assert "def reference(" in text  # the oracle lives in the shared module


def test_a_heldout_fallback_reference_loads_in_a_fresh_process(tmp_path, monkeypatch):
    """The generated fallback workload execs the instance file, which imports heldout_ops: a fresh
    process (a gate worker) must find the package without having loaded the instance first."""
    import os
    import subprocess
    import sys

    from klineage.heldout.instances import _fallback_workload, load_instances
    monkeypatch.setenv("KLINEAGE_HOME", str(tmp_path / "home"))
    inst = next(i for i in load_instances(ROOT / "heldout") if i.name == "rmsnorm_8192x8192")
    path = _fallback_workload(inst).path
    code = ("import sys; from klineage.workload import load_workload; "
            f"w = load_workload({str(path)!r}); print(w.name, w.vendor_name.split()[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ),
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["rmsnorm_8192x8192", "torch.compile"]
