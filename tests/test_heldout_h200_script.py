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
from klineage.heldout.plan import first_sweep_round  # noqa: E402
from klineage.heldout.run import HeldoutConfig  # noqa: E402
from klineage.heldout.sources import skill_sources  # noqa: E402
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


def test_a_harness_fault_stops_the_run_before_it_is_stored(tmp_path, monkeypatch):
    """A gate worker that answers harness_error (its own bug) stops the run at the first such answer,
    here a control-random candidate after the idiom kernel and its final rounds passed: nothing of it
    is stored, so neither the export nor a resumed call on the same database sees the fault as the
    kernel's result."""
    import gzip
    import json

    import klineage.gate.pool as pool
    from klineage.store import open_store

    class FaultyWorker:
        """Passes every kernel without sweep flags (no timing: the scripted records carry none), and
        answers harness_error for any other."""
        env_info = {"gpu": "scripted worker (test double)", "capability": "9.0"}
        builds: dict = {}

        def __init__(self, *a, **kw):
            pass

        def evaluate(self, request, stall_s=60.0, total_s=900.0):
            if FaultyWorker.builds.get(request["so_path"]):
                return {"status": "RUNTIME_ERROR", "error_kind": "harness_error", "fatal": True, "env": self.env_info,
                        "error_message": "Traceback ...\nNameError: name 'spin' is not defined"}
            return {"status": "PASSED", "env": self.env_info, "correctness": [], "timing": [
                {"shape": s["shape"], "latency_us": 90.0, "vendor_latency_us": 100.0, "trial_medians_us": [90.0] * 3,
                 "vendor_trial_medians_us": [100.0] * 3, "speedup_vs_vendor": 100 / 90, "spread": 0.0}
                for s in request["shapes"] if s["kind"] == "benchmark"]}

        def close(self):
            pass

    import klineage.exec.serial as serial
    from klineage.gate.compile import compile_kernel

    def note(source, arch="sm_90a", extra_flags=(), *a, **kw):
        res = compile_kernel(source, arch, extra_flags, *a, **kw)
        FaultyWorker.builds[res.so_path] = bool(extra_flags)
        return res
    monkeypatch.setattr(serial, "compile_kernel", note)
    monkeypatch.setattr(pool, "GateWorker", FaultyWorker)
    monkeypatch.setattr(pool, "gpu_available", lambda: True)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    db, out = tmp_path / "run.duckdb", tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["heldout_h200.py", "--out", str(out), "--db", str(db),
                                      "--instances", "rmsnorm_16384x4096", "--conditions", "idiom,control-random"])
    assert heldout_h200.main() == 1
    rec = json.loads((out / "heldout_h200_rmsnorm_16384x4096.json").read_text())
    assert rec["failure"].startswith("harness fault: rmsnorm_16384x4096 kernel") and "NameError" in rec["failure"]
    assert rec["run_id"] is None
    with gzip.open(out / "heldout_h200_rmsnorm_16384x4096.jsonl.gz", "rt") as f:
        recs = [json.loads(line) for line in f]
    assert len(recs) == rec["exported_evaluations"] >= 3  # the idiom kernel: its evaluation and two final rounds
    assert rec["family_wall_s"]["reduction"] == rec["instance_wall_s"]["rmsnorm_16384x4096"] > 0
    assert rec["rows_seeded"] == 0 and rec["rows_decided"] == 1  # the idiom row; the fault stopped the other
    assert all(r["status"] == "PASSED" for r in recs)
    store = open_store(db)
    try:
        assert not [r for r in store.find_evaluations() if (r["result"] or {}).get("error_kind") == "harness_error"]
    finally:
        store.close()


def test_background_build_compiles_in_the_runs_order_and_stop_drops_the_rest(monkeypatch):
    import threading
    import time

    import klineage.gate.compile as compile_mod

    started, release = [], threading.Event()

    class Done:
        ok, cached = True, False

    def slow(source, arch="sm_90a", extra_flags=(), *a, **kw):
        started.append(source)
        release.wait(5)
        return Done()
    monkeypatch.setattr(compile_mod, "compile_kernel", slow)
    monkeypatch.setattr(heldout_h200.os, "cpu_count", lambda: 6)  # two compile at once, four cores left
    jobs = [(f"k{i}", ()) for i in range(10)]
    bg = heldout_h200.BackgroundBuild(jobs)
    deadline = time.monotonic() + 5
    while len(started) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    out = bg.stop()  # two are compiling; the other eight have not started
    release.set()
    bg.pool.shutdown(wait=True)
    assert started == ["k0", "k1"] and out["jobs"] == 2 and out["kernels"] == 10 and out["built_or_cached"] == 0


def test_with_buildable_axes_prebuild_takes_the_grid_points_that_build(monkeypatch, library):
    """sweep_axes = "buildable": attention sweeps 4 axes (81 points, over PREBUILD_GRID) and the
    prebuild takes the grid's buildable points, none the check refuses."""
    import klineage.apply.materialize as mat
    from tests.apply.test_sweep_axes import Fake, attention_rule

    check = Fake(attention_rule)
    monkeypatch.setattr(mat, "make_buildable", lambda axes, arch=None: check if axes == "buildable" else None)
    (inst,) = load_instances(ROOT / "heldout", ["attention"], ["attn_gqa_b2_s2048"])
    idiom = inst.starts["idiom"][1]
    cfg = HeldoutConfig(sweep_rounds=3, sweep_axes="buildable")
    jobs = _jobs(monkeypatch, [inst], cfg, library)
    grid = sweep_grid(idiom, check)
    assert len(grid) == 81 > heldout_h200.PREBUILD_GRID
    flags = lambda pts: {(idiom, point_flags(p)) for p in pts}  # noqa: E731
    built = [p for p in grid[1:] if attention_rule({**mat.tunables(idiom), **p})]
    assert built and flags(built) <= jobs
    first = first_sweep_round(inst, cfg, *library)
    refused = flags(grid[1:]) - flags(built)
    # the steered rounds hold no refused point; only control-random's unfiltered draws may
    steered = flags(first["skills"]) | flags(first["control-foreign"])
    assert steered <= jobs and not steered & refused
    assert jobs & refused <= flags(first["control-random"])


def test_the_plans_front_end_answers_are_recorded_and_answer_for_nvcc(tmp_path, monkeypatch):
    """--front-end-answers writes what the plan asked (here cut to two questions); loaded back where no
    nvcc is, they answer the same questions without it."""
    import klineage.gate.compile as compile_mod

    monkeypatch.setattr(compile_mod, "_FE_RECORDED", {})
    monkeypatch.setattr(compile_mod, "_FE_SEEN", {})
    monkeypatch.setattr(compile_mod, "nvcc_version", lambda nvcc="nvcc": "13.0, V13.0.88")
    monkeypatch.setattr(compile_mod, "_run_nvcc", lambda cmd, *a, **k: (
        0, "") if "-DN=1" in cmd else (2, "kernel.cu(4): error: static assertion failed"))
    monkeypatch.setenv("KLINEAGE_BUILD_CACHE", str(tmp_path / "cache"))
    asks = [("-DN=1",), ("-DN=2",)]
    src = "#ifndef N\n#define N 0\n#endif\n__global__ void k() { static_assert(N == 1, \"\"); }\n"

    def plan(instances, cfg, lib, sources):  # what prebuild_jobs asks, cut to two questions
        return [compile_mod.front_end_accepts(src, extra_flags=f) for f in asks]
    monkeypatch.setattr(heldout_h200, "prebuild_jobs", plan)
    packed = tmp_path / "records" / ("plan" + compile_mod.FRONT_END_SUFFIX)
    assert heldout_h200.write_front_end_answers(packed, [], HeldoutConfig()) == 0
    monkeypatch.setattr(compile_mod, "_FE_SEEN", {})
    monkeypatch.setattr(compile_mod, "nvcc_version", lambda nvcc="nvcc": "")  # another machine, no nvcc
    from klineage.errors import InputError
    with pytest.raises(InputError, match="recorded answers"):
        compile_mod.front_end_accepts(src, extra_flags=asks[0])
    from klineage.store.recorded import load_front_end
    assert load_front_end([tmp_path / "records"]) == 2
    assert [compile_mod.front_end_accepts(src, extra_flags=f) for f in asks] == [True, False]


def test_the_plan_lists_each_conditions_first_kernels(monkeypatch, library):
    """prebuild_kernels on a reduction with the structural pipeline's conditions (unfiltered axes here:
    no nvcc): the starts, every condition's structural path, control-structural's chain and its first
    points on each kernel of it, the random control's draws on its path's end and its start, and the
    idiom arm's points."""
    from klineage.heldout.plan import prebuild_kernels, structural_control_round, structural_paths
    from klineage.apply.materialize import random_points
    from klineage.heldout.sources import random_seed
    (inst,) = load_instances(ROOT / "heldout", ["reduction"], ["rmsnorm_8192x8192"])
    cfg = HeldoutConfig(conditions=("idiom", "skills", "control-random", "control-foreign", "control-structural"),
                        structural=True, idiom_arm=True, sweep_rounds=3, seed=20261205)
    got = {(s, tuple(sorted(p.items()))) for s, p in prebuild_kernels(inst, cfg, *library)}
    kernels = {s for s, p in got if not p}
    assert {src for _, src in inst.starts.values()} <= kernels
    paths = structural_paths(inst, cfg, *library)
    assert paths["control-structural"] == paths["control-random"] and paths["control-structural"]
    for path in paths.values():
        assert {st["source"] for st in path} <= kernels
    chain = structural_control_round(inst, cfg, paths["control-structural"])
    assert len(chain) == 1 + len(paths["control-structural"])
    srcs = [inst.starts["naive"][1]] + [st["source"] for st in paths["control-structural"]]
    for src, pts in zip(srcs, chain.values()):
        assert pts and {(src, tuple(sorted(p.items()))) for p in pts} <= got
    seed = random_seed(cfg.seed, inst.name)
    for src in (paths["control-random"][-1]["source"], inst.starts["naive"][1], inst.starts["idiom"][1]):
        assert {(src, tuple(sorted(p.items()))) for p in random_points(src, cfg.budget, seed)[1:]} <= got


def test_a_plan_pack_is_read_back_in_the_runs_order(tmp_path):
    import json
    import lzma
    plan = {"sources": {"a": "A", "b": "B"}, "instances": {"x": [["a", []], ["b", ["-DN=2"]]], "y": [["a", []]]}}
    (tmp_path / heldout_h200.PLAN_JOBS).write_bytes(lzma.compress(json.dumps(plan).encode()))
    assert heldout_h200.read_plan([tmp_path], ["y", "x"]) == [("A", ()), ("B", ("-DN=2",))]
    assert heldout_h200.read_plan([tmp_path / "none"], ["x"]) is None


def test_rows_of_the_same_run_and_code_are_taken_others_are_searched_again(tmp_path):
    import gzip
    import json

    def rows(run, code, name, status="PASSED"):
        recs = {"run_id": run, "code": code, "rows": [{"instance": "i", "condition": "skills", "status": status},
                                                      {"instance": "j", "condition": "idiom", "status": "MISSING"}]}
        (tmp_path / name).write_bytes(gzip.compress(json.dumps(recs).encode()))
    rows("r1", "c1", "heldout_h100_call1.rows.json.gz")
    rows("r2", "c1", "heldout_h100_other.rows.json.gz")
    rows("r1", "c0", "heldout_h100_old.rows.json.gz", status="FAILED")
    got = heldout_h200.seeded_rows([tmp_path], "r1", "c1")
    assert got == [{"instance": "i", "condition": "skills", "status": "PASSED"}]
    assert heldout_h200.seeded_rows([tmp_path], "r1", "c2") == []
    assert len(heldout_h200.code_hash()) == 64


def test_rows_of_another_split_of_the_same_key_and_code_are_taken_for_this_calls_instances(tmp_path):
    import gzip
    import json

    def rows(name, **rec):
        rec["rows"] = [{"instance": n, "condition": "skills", "status": "PASSED"} for n in ("a", "b", "c")]
        (tmp_path / name).write_bytes(gzip.compress(json.dumps(rec).encode()))
    ids = {"a": {"workload": "wa"}, "b": {"workload": "wb"}, "c": {"workload": "wc"}}
    rows("heldout_h100_call1_reduction-1of2.rows.json.gz", run_id="s1", run_key="k", code="c1", identities=ids)
    rows("heldout_h100_call0.rows.json.gz", run_id="s0", code="c1")  # written before run_key: its run only
    here = {"a": {"workload": "wa"}, "c": {"workload": "wc"}, "z": {"workload": "wz"}}
    got = heldout_h200.seeded_rows([tmp_path], "whole", "c1", "k", here)
    assert sorted(r["instance"] for r in got) == ["a", "c"]
    changed = {**here, "c": {"workload": "wc2"}}  # c's workload file changed since: searched again
    assert [r["instance"] for r in heldout_h200.seeded_rows([tmp_path], "whole", "c1", "k", changed)] == ["a"]
    assert heldout_h200.seeded_rows([tmp_path], "whole", "c1", "other", here) == []
    assert heldout_h200.seeded_rows([tmp_path], "whole", "c2", "k", here) == []  # other code: searched again
    assert len(heldout_h200.seeded_rows([tmp_path], "s0", "c1", "other", here)) == 3


def test_a_run_key_is_the_run_id_without_the_instances():
    cfg = HeldoutConfig()
    lib = [{"skill_id": "x"}, {"skill_id": "y"}]
    assert heldout_h200.run_key(cfg, lib) == heldout_h200.run_key(cfg, list(reversed(lib)))
    assert heldout_h200.run_key(cfg, lib) != heldout_h200.run_key(HeldoutConfig(budget=cfg.budget + 1), lib)
    assert heldout_h200.run_key(cfg, lib) != heldout_h200.run_key(cfg, lib[:1])


def test_the_shards_of_a_family_cover_its_instances_once():
    from types import SimpleNamespace
    insts = [SimpleNamespace(name=n) for n in ("e", "a", "d", "c", "b")]
    parts = [heldout_h200.shard(insts, f"{k}/2") for k in (1, 2)]
    assert [[i.name for i in p] for p in parts] == [["a", "c", "e"], ["b", "d"]]
    assert heldout_h200.shard(insts, None) is insts
    for bad in ("3/2", "x", "1/0"):
        with pytest.raises(SystemExit, match="--shard"):
            heldout_h200.shard(insts, bad)


def test_a_call_refuses_records_of_another_gpu(tmp_path, monkeypatch):
    import gzip
    import json
    rec = tmp_path / "records"
    rec.mkdir()
    (rec / "heldout_h200_call1.jsonl.gz").write_bytes(gzip.compress(json.dumps(
        {"gpu": "NVIDIA H200", "eval_key": "k"}).encode() + b"\n"))
    assert heldout_h200.seeded_gpus([rec]) == {"NVIDIA H200"}
    monkeypatch.setattr(heldout_h200, "environment", lambda: {"nvidia_smi": "NVIDIA H100 80GB HBM3, 580.159.04"})
    monkeypatch.setattr(sys, "argv", ["heldout_h200.py", "--out", str(tmp_path / "out"), "--db", str(tmp_path / "d.db"),
                                      "--instances", "rmsnorm_16384x4096", "--seed-recorded", str(rec)])
    assert heldout_h200.main() == 2
    assert heldout_h200.card_prefix("NVIDIA H100 80GB HBM3, 580") == "heldout_h100"
    assert heldout_h200.card_prefix("NVIDIA H200, 580") == heldout_h200.card_prefix("") == "heldout_h200"


def test_the_references_tuned_configurations_go_from_call_to_call(tmp_path, monkeypatch):
    """A call packs FlagGems' tuned configurations; the next, seeded with them, unpacks them where its
    gate workers' FlagGems looks (FLAGGEMS_CACHE_DIR), so both time the reference at one configuration."""
    monkeypatch.setenv("FLAGGEMS_CACHE_DIR", str(tmp_path / "first"))
    cache = heldout_h200.load_reference_cache([tmp_path / "nothing"])
    assert cache == tmp_path / "first"
    out = tmp_path / "out"
    out.mkdir()
    assert not heldout_h200.save_reference_cache(cache, out)  # nothing tuned yet
    (cache / "config_cache").mkdir(parents=True)
    (cache / "config_cache" / "TunedConfig_NVIDIA_H100_80GB_HBM3_triton_3_6.db").write_bytes(b"sqlite")
    assert heldout_h200.save_reference_cache(cache, out)
    monkeypatch.setenv("FLAGGEMS_CACHE_DIR", str(tmp_path / "second"))
    again = heldout_h200.load_reference_cache([out])
    assert (again / "config_cache" / "TunedConfig_NVIDIA_H100_80GB_HBM3_triton_3_6.db").read_bytes() == b"sqlite"


def test_a_calls_export_leaves_out_what_the_calls_before_recorded(tmp_path):
    import gzip
    import json
    f = tmp_path / "x.jsonl.gz"
    f.write_bytes(gzip.compress(b"".join(json.dumps({"eval_key": k}).encode() + b"\n" for k in "abc")))
    assert heldout_h200.drop_records(f, {"b"}) == 2
    with gzip.open(f, "rt") as fh:
        assert [json.loads(line)["eval_key"] for line in fh] == ["a", "c"]


def test_a_folder_the_split_call_unpacked_is_not_unpacked_again(tmp_path, monkeypatch):
    """The processes of a split call share one FlagGems folder, filled once before they start: a
    process finds the configurations there and does not unpack the seed over them."""
    seed = tmp_path / "seed"
    (seed / "config_cache").mkdir(parents=True)
    (seed / "config_cache" / "TunedConfig.db").write_bytes(b"seeded")
    packed = tmp_path / "packed"
    packed.mkdir()
    assert heldout_h200.save_reference_cache(seed, packed)
    shared = tmp_path / "shared"
    (shared / "config_cache").mkdir(parents=True)
    (shared / "config_cache" / "TunedConfig.db").write_bytes(b"tuned since")  # another process tuned more
    monkeypatch.setenv("FLAGGEMS_CACHE_DIR", str(shared))
    assert heldout_h200.load_reference_cache([packed]) == shared
    assert (shared / "config_cache" / "TunedConfig.db").read_bytes() == b"tuned since"


def test_the_wall_table_counts_a_split_calls_processes_as_one_call(tmp_path):
    import json
    for tag, fams, wall in (("call1", {"gemm": 470.0}, 478.0), ("call3_attention", {"attention": 400.0}, 410.0),
                            ("call3_reduction-1of2", {"reduction": 300.0}, 305.0),
                            ("call3_reduction-2of2", {"reduction": 350.0}, 355.0),
                            ("call4_reduction", {"reduction": 100.0}, 110.0)):
        (tmp_path / f"heldout_h100_{tag}.json").write_text(json.dumps({"tag": tag, "family_wall_s": fams,
                                                                       "wall_s": wall}))
    table = heldout_h200.wall_table(tmp_path)
    assert "| attention | 400 s |" in table and "| reduction | 450 s |" in table  # the shards ran at once
    assert "| all (3 calls, start-up and export included) | 998 s |" in table
