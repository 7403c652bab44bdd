"""The Ray executor on a local CPU cluster: a replayed mine gives the serial library, also when a
Ray worker is killed mid-run (its task is retried and recorded once).

Ray is in the test extra, so CI runs these; elsewhere they are skipped when Ray is missing."""
import json
import os

import pytest

from tests.exec.support import home, library, mine

if os.environ.get("CI"):
    import ray  # noqa: F401  (CI installs '.[test]', which has Ray: a missing Ray fails here)
else:
    ray = pytest.importorskip("ray")

pytestmark = pytest.mark.nvcc


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A local Ray cluster on this machine's CPUs (no GPU), with the session's build cache."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20,
             runtime_env={"env_vars": {"KLINEAGE_HOME": str(home(tmp_path_factory))}})
    yield ray.cluster_resources()
    ray.shutdown()


def test_replayed_mine_through_ray_is_the_serial_library(cluster, subset_config, serial_library, tmp_path):
    summary, dump, counts = serial_library
    db = tmp_path / "ray.duckdb"
    out = mine(subset_config, db, "--executor", "ray", "--check-builds")
    got_dump, got_counts = library(db)
    assert got_dump == dump and got_counts == counts
    assert out["evaluations"] == summary["evaluations"] and out["missing"] == []
    ex = out["executor"]
    assert ex["executor"] == "ray" and ex["cluster_gpus"] == 0 and ex["cluster_cpus"] == cluster["CPU"]
    # replay asks the cluster for CPUs only: every build is a compile task, no gate task runs
    assert ex["compile_requests"] == summary["phases"]["compile_requests"] and ex["live_evaluations"] == 0


def test_a_killed_ray_worker_changes_nothing(cluster, subset_config, serial_library, tmp_path):
    from klineage.exec.ray_exec import KillOnce, RayExecutor
    from klineage.gate.gate import Gate
    from klineage.lineage.mine import load_config, run_mine
    from klineage.store import open_store
    from klineage.store.recorded import import_recorded

    summary, dump, counts = serial_library
    marker = tmp_path / "killed"
    # the 20th compile task of the run kills its own worker process (SIGKILL) on its first attempt
    ex = RayExecutor(task_hook=KillOnce(marker, kind="compile", after=20))
    run, _ = load_config(subset_config)
    db = tmp_path / "killed.duckdb"
    store = open_store(db)
    try:
        import_recorded(store)
        gate = Gate(store, run.gate_config(), build_stored=True)
        out = run_mine(run, store, gate, replay=True, executor=ex)
    finally:
        store.close()
        ex.close()
    assert marker.exists(), "no worker was killed"
    killed_pid = int(marker.read_text())
    assert not os.path.exists(f"/proc/{killed_pid}")  # that worker is gone; its task was retried elsewhere
    got_dump, got_counts = library(db)
    assert got_dump == dump and got_counts == counts  # recorded once: no row more than the serial run's
    assert json.loads(json.dumps(out["evaluations"])) == summary["evaluations"] and out["missing"] == []
    assert ex.stats()["compile_requests"] == summary["phases"]["compile_requests"]


def test_a_live_evaluation_on_a_cluster_without_gpus_says_so(cluster):
    from klineage.errors import NoDeviceError
    from klineage.exec.ray_exec import RayExecutor
    ex = RayExecutor()
    try:
        with pytest.raises(NoDeviceError, match="no GPU in the Ray cluster"):
            ex.evaluate_live("src", None, {"workload_path": "/nonexistent"}, "main", (), stall_s=1, total_s=1)
    finally:
        ex.close()
    assert ray.is_initialized()  # an executor that joined a running cluster leaves it running
