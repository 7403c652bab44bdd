"""benchmarks/heldout_h200.py on the CPU: what its --prebuild compiles before the run (the compiler
is replaced by a recorder; the run itself needs the H200)."""
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import heldout_h200  # noqa: E402

from klineage.apply.materialize import point_flags, sweep_grid  # noqa: E402
from klineage.heldout import load_instances  # noqa: E402
from klineage.heldout.run import HeldoutConfig, first_sweep_round, skill_sources  # noqa: E402
from klineage.store import open_store  # noqa: E402


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    db = tmp_path_factory.mktemp("lib") / "lib.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    store = open_store(db)
    try:
        lib = store.skills()
        return lib, skill_sources(store, lib)
    finally:
        store.close()


def _jobs(monkeypatch, instances, cfg, library):
    import klineage.gate.compile as compile_mod

    built = []

    class Done:
        ok, cached = True, False

    def record(source, arch="sm_90a", extra_flags=(), *a, **kw):
        built.append((source, tuple(extra_flags)))
        return Done()

    monkeypatch.setattr(compile_mod, "compile_kernel", record)
    out = heldout_h200.prebuild(instances, cfg, *library)
    assert out["kernels"] == len(built) == len(set(built))
    return set(built)


def test_prebuild_covers_every_first_round_and_with_rounds_the_grid(monkeypatch, library):
    insts = load_instances(ROOT / "heldout", ["gemm", "attention"], ["mm_4096", "attn_gqa_b2_s2048"])
    for rounds in (1, 3):
        cfg = HeldoutConfig(sweep_rounds=rounds)
        jobs = _jobs(monkeypatch, insts, cfg, library)
        for inst in insts:
            idiom = inst.starts["idiom"][1]
            assert (idiom, ()) in jobs
            for cond, pts in first_sweep_round(inst, cfg, *library).items():
                assert pts and all((idiom, point_flags(p)) in jobs for p in pts), (inst.name, cond)
            grid = {(idiom, point_flags(p)) for p in sweep_grid(idiom)[1:]}
            assert len(grid) == 26
            assert (grid <= jobs) == (rounds > 1), (inst.name, rounds)
