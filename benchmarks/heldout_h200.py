"""The held-out check on a GPU machine: `klineage heldout` over heldout/ with every condition (llm
listed as not run without a key), its evaluations exported for a CPU replay, and the environment.

    python benchmarks/heldout_h200.py --out DIR [--config pipelines/heldout.toml] [--db PATH]
        [--families gemm,attention,reduction] [--instances NAME,...] [--budget N] [--conditions ...]
        [--vendor auto|primary|fallback] [--seed-recorded PATH ...] [--time-limit S] [--prebuild [--prebuild-wait]]
        [--tag NAME]
    python benchmarks/heldout_h200.py --front-end-answers benchmarks/results/heldout_h200/heldout_h200_plan.front_end.json.gz

Writes under DIR:
  environment.json              GPU and driver (nvidia-smi), nvcc, python, torch, triton, flag_gems, duckdb
  heldout_h200_<tag>.jsonl.gz   every evaluation of the selected instances (primary and fallback
                                references), what `klineage heldout --replay --records` reads
  report/heldout.json, report/heldout.txt, report/kernels/   the report (klineage.heldout.report schema)
  heldout_h200_<tag>.json       this call: arguments, wall time (per instance and family too), whether the
                                time limit cut it, exported count
  heldout_h200_<tag>.front_end.json.gz   nvcc's front-end answers the run used (which sweep points build,
                                sweep_axes = "buildable"), so a replay picks the same axes with no nvcc
  heldout_h200_<tag>.library.json.gz     the library the run measured (content hash, canonical dump) and the
                                expert corpus its memorization audit read (klineage.heldout.records): a
                                replay adopts them, so it stands when the shipped library changes later
With a pipeline whose [heldout] sets structural = true (pipelines/heldout_structural.toml), --prebuild
builds the plan a CPU machine wrote into the records folder (heldout_plan.jobs.json.xz, by
--plan-pack: every kernel the conditions are known to gate first, klineage.heldout.plan.prebuild_kernels,
with nvcc's front-end answers for their sweeps in heldout_plan.front_end.json.gz), in run order beside
the run; without one, a process of its own works out each searching condition's structural
rewrites and first sweep round and builds them (slow: the recognisers run on the device's CPU).

    python benchmarks/heldout_h200.py --plan-pack DIR --config pipelines/heldout_structural.toml [--families F]
        (a CPU machine with nvcc: writes DIR/heldout_plan.jobs.json.xz and DIR/heldout_plan.front_end.json.gz)

Resuming over calls: each call exports, besides the evaluations, the rows it decided
(<prefix>_<tag>.rows.json.gz: the run's rows, with the hash of the code that decided them); a later
call seeded with them (--seed-recorded) takes the rows of the same run and code as decided and
searches only what is left, in the same order, so no call measures what an earlier one recorded and
none works through decided instances again. A call refuses to run on another GPU model than the
seeded evaluations'. FlagGems' tuned configurations (flaggems_config_cache.tar.gz) go from call to
call the same way, so every call times the reference at the configuration the first call's
autotuning chose. The call record gives the wall time each instance and family took in it.
Front-end answers recorded in the pipeline's records folder and the --seed-recorded paths (by this
nvcc version) are read first: --front-end-answers writes the plan's, so a call asks nvcc for none of them.
The database (--db, default /tmp/klineage_heldout_h200.duckdb, a copy of skills_db/skills.duckdb made
when missing) stays outside DIR, so a later call on a still-warm machine resumes from it.
The run can be split over device calls: a call cut by --time-limit (or SIGTERM from `timeout`) exports
what it measured and exits 3; the next call with --seed-recorded pointing at the exported files (copied
into the repository, e.g. benchmarks/results/heldout_h200/) reuses every recorded evaluation and goes on.
<tag> defaults to the family / instance filter ("all" without one).
An evaluation that answers harness_error (a bug in the gate worker, not a result of the kernel) stops
the run at once, before it is stored (refuse_harness_errors): no later call, and no export, treats the
fault as a kernel's result.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class TimeLimit(BaseException):
    """The time limit or SIGTERM: a BaseException, so no `except Exception` inside the run records it as a step."""


class HarnessFault(BaseException):
    """A gate evaluation answered harness_error: a bug in the gate worker, not a result of the kernel.
    The run stops at the first (every later evaluation would meet it too, and spend the device's time)."""


def refuse_harness_errors(store) -> None:
    """Make `store` raise HarnessFault instead of storing an evaluation that answered harness_error,
    wherever in the run it comes (a start, a candidate, a re-measure, a final round): the fault never
    becomes a stored result that a resumed run or an export would treat as the kernel's."""
    put = store.put_evaluation

    def guarded(rec: dict, *a, **kw):
        res = rec.get("result") or {}
        if res.get("error_kind") == "harness_error":
            raise HarnessFault(f"{rec.get('workload_name')} kernel {str(rec.get('kernel_hash'))[:12]}: "
                               f"{(res.get('error_message') or '')[-1500:]}")
        return put(rec, *a, **kw)
    store.put_evaluation = guarded


def environment() -> dict:
    """GPU, driver and toolchain facts of this machine (missing tools are recorded as missing)."""
    def run(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"unavailable ({type(exc).__name__})"

    def dist(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None
    return {"nvidia_smi": run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
                                             "clocks.max.mem,power.limit", "--format=csv,noheader"]),
            "nvcc": run(["nvcc", "--version"]).splitlines()[-2:],
            "python": platform.python_version(), "torch": dist("torch"), "triton": dist("triton"),
            "flag_gems": dist("flag_gems") or dist("flag-gems"), "sqlalchemy": dist("sqlalchemy"),
            "duckdb": dist("duckdb"), "tree_sitter": dist("tree-sitter"), "libclang": dist("libclang"),
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


PREBUILD_GRID = 64  # a sweep grid this small is built whole: later sweep rounds move inside it


def prebuild_jobs(instances, cfg, library, sources) -> list[tuple[str, tuple[str, ...]]]:
    """(source, flags) of every kernel the conditions will gate first, instance by instance in the
    run's order: each start kernel, the first sweep round of each searching condition
    (klineage.heldout.plan.first_sweep_round, what the dry run prints) and the unsteered one, and, when
    cfg.sweep_rounds > 1, the steered conditions' second round at the start (what they gate where the
    first keeps no winner) and the idiom kernel's whole sweep grid where it has at most PREBUILD_GRID points
    (each later round's points are one axis away from a winner); with cfg.sweep_axes = "buildable", only
    the grid's points the kernel's static checks accept. With cfg.structural, the start kernels only:
    the searching conditions sweep the kernels their structural rewrites make (StructuralBuild)."""
    from klineage.apply.materialize import buildable_only, make_buildable, point_flags, sweep_grid, sweep_points
    from klineage.heldout.plan import first_sweep_round

    buildable = make_buildable(cfg.sweep_axes)
    jobs = {}
    for inst in instances:
        for _, src in inst.starts.values():
            jobs[(src, ())] = None
        if cfg.structural:
            continue
        idiom = inst.starts["idiom"][1]
        first = first_sweep_round(inst, cfg, library, sources, rounds=min(2, cfg.sweep_rounds))
        pts = sweep_points(idiom, [], buildable) + [p for ps in first.values() for p in ps]
        grid = sweep_grid(idiom, buildable) if cfg.sweep_rounds > 1 else []
        grid = grid[:1] + buildable_only(idiom, grid[1:], buildable)
        pts += grid if len(grid) <= PREBUILD_GRID else []
        for p in pts:
            jobs[(idiom, point_flags(p))] = None
    return list(jobs)


def prebuild(instances, cfg, library, sources) -> dict:
    """Compile prebuild_jobs in parallel and wait for them all."""
    from klineage.gate.compile import compile_kernel
    jobs = prebuild_jobs(instances, cfg, library, sources)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        res = list(pool.map(lambda j: compile_kernel(j[0], extra_flags=j[1]), jobs))
    return {"kernels": len(res), "ok": sum(r.ok for r in res), "cached": sum(r.cached for r in res),
            "wall_s": round(time.perf_counter() - t0, 1), "jobs": os.cpu_count()}


class BackgroundBuild:
    """prebuild_jobs compiled by a pool beside the run, in the run's order, leaving four cores to the
    run, its gate workers and their host-side dispatch (which the gate's spin is sized from): the
    first instance starts at once, and the run's own request for a kernel still building compiles it
    too (compile_kernel publishes atomically; the loser's copy goes). stop() drops what has not
    started; what is compiling finishes before the interpreter exits."""

    def __init__(self, jobs, workers: int | None = None):
        from klineage.gate.compile import compile_kernel
        self.workers = workers or max(1, (os.cpu_count() or 1) - 4)
        self.pool = ThreadPoolExecutor(max_workers=self.workers)
        self.futures = [self.pool.submit(compile_kernel, src, extra_flags=flags) for src, flags in jobs]
        self.t0 = time.perf_counter()

    def stop(self) -> dict:
        self.pool.shutdown(wait=False, cancel_futures=True)
        done = [f.result() for f in self.futures if f.done() and not f.cancelled() and f.exception() is None]
        return {"kernels": len(self.futures), "built_or_cached": len(done), "ok": sum(r.ok for r in done),
                "cached": sum(r.cached for r in done), "jobs": self.workers, "background": True,
                "wall_s_at_stop": round(time.perf_counter() - self.t0, 1)}


def _structural_instance(args) -> list[tuple[str, tuple[str, ...]]]:
    """(source, flags) of one instance's structural paths (klineage.heldout.plan.structural_paths: the
    rewrites each searching condition gates if each is kept) and the first sweep round on their ends."""
    root, name, cfg, library, sources = args
    from klineage.apply.materialize import point_flags
    from klineage.heldout import load_instances
    from klineage.heldout.plan import first_sweep_round, structural_paths
    (inst,) = load_instances(root, None, [name])
    paths = structural_paths(inst, cfg, library, sources)
    jobs = {(st["source"], ()): None for path in paths.values() for st in path}
    for pts in first_sweep_round(inst, cfg, library, sources, paths=paths).values():
        for cond, path in paths.items():
            if path:
                jobs.update({(path[-1]["source"], point_flags(p)): None for p in pts})
    return list(jobs)


def _structural_build(root, names, cfg, library, sources, threads):
    """In a process of its own: the structural jobs of the instances `names`, each instance's compiled
    (by `threads` nvcc at a time, into the build cache the run reads) as soon as it is known."""
    from klineage.gate.compile import compile_kernel
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for n in names:
            for src, flags in _structural_instance((root, n, cfg, library, sources)):
                pool.submit(compile_kernel, src, extra_flags=flags)


class StructuralBuild:
    """With `structural`, the kernels of the structural rewrites each searching condition gates if it
    keeps them, and the first sweep round after them, built beside the run by processes of their own
    (working them out takes the recognisers and detectors a while per instance; the run does not
    wait for them, and builds itself what it reaches first)."""

    def __init__(self, root, instances, cfg, library, sources):
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        self.workers = max(1, min(len(instances), ((os.cpu_count() or 1) - 4) // 2))
        names = [i.name for i in instances]
        self.procs = [ctx.Process(target=_structural_build, daemon=True,
                                  args=(root, names[k::self.workers], cfg, library, sources, 2))
                      for k in range(self.workers)]
        for p in self.procs:
            p.start()
        self.t0 = time.perf_counter()

    def stop(self) -> dict:
        done = sum(not p.is_alive() for p in self.procs)
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        return {"structural": True, "processes": self.workers, "finished": done,
                "wall_s_at_stop": round(time.perf_counter() - self.t0, 1)}


PLAN_JOBS = "heldout_plan.jobs.json.xz"  # xz: the kernels' sources repeat each other across instances
PLAN_FRONT_END = "heldout_plan.front_end.json.gz"
ROWS_SUFFIX = ".rows.json.gz"


def code_hash() -> str:
    """sha256 over the klineage package's Python sources (names and bytes): the code that decides a
    run's rows. Rows decided by other code are searched again from the records, not taken."""
    import hashlib
    h = hashlib.sha256()
    pkg = ROOT / "klineage"
    for f in sorted(pkg.rglob("*.py")):
        data = f.read_bytes()
        h.update(f"{f.relative_to(ROOT).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def card_prefix(nvidia_smi: str) -> str:
    """The records' file prefix, named by the card the environment shows (heldout_h100 on an H100;
    heldout_h200 otherwise, as the script has always named them)."""
    return "heldout_h100" if "H100" in (nvidia_smi or "") else "heldout_h200"


def plan_pack(out: Path, instances, cfg, library, sources) -> dict:
    """Write what a device call needs of the plan into `out`: the kernels the conditions are known to
    gate first (klineage.heldout.plan.prebuild_kernels) as PLAN_JOBS ({"nvcc", "sources": {hash:
    source}, "instances": {name: [[hash, flags], ...]}}) and every nvcc front-end answer working
    them out asked as PLAN_FRONT_END; returns counts and seconds per instance."""
    import lzma
    from klineage.apply.materialize import point_flags
    from klineage.gate.compile import export_front_end_answers, nvcc_version
    from klineage.gate.gate import kernel_hash
    from klineage.heldout.plan import prebuild_kernels
    srcs, per, secs = {}, {}, {}
    for inst in instances:
        t = time.perf_counter()
        jobs = []
        for src, point in prebuild_kernels(inst, cfg, library, sources):
            h = kernel_hash(src)
            srcs[h] = src
            jobs.append([h, list(point_flags(point))])
        per[inst.name] = jobs
        secs[inst.name] = round(time.perf_counter() - t, 1)
        print(f"plan: {inst.name}: {len(jobs)} kernels in {secs[inst.name]} s", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    with lzma.open(out / PLAN_JOBS, "wt", preset=9) as f:
        json.dump({"nvcc": nvcc_version(), "config": cfg.to_dict(), "sources": srcs, "instances": per}, f,
                  sort_keys=True)
    n_fe = export_front_end_answers(out / PLAN_FRONT_END)
    return {"instances": len(per), "kernels": sum(len(v) for v in per.values()),
            "distinct": len({(h, tuple(f)) for v in per.values() for h, f in v}), "sources": len(srcs),
            "front_end_answers": n_fe, "seconds": secs}


def read_plan(paths, names: list[str]) -> list[tuple[str, tuple[str, ...]]] | None:
    """(source, flags) of the plan's jobs for the instances `names`, in that order, from the first
    PLAN_JOBS among `paths` (folders); None when there is none."""
    import lzma
    for p in map(Path, paths):
        f = p / PLAN_JOBS if p.is_dir() else None
        if f is not None and f.is_file():
            with lzma.open(f, "rt") as fh:
                plan = json.load(fh)
            jobs = {}
            for n in names:
                for h, flags in plan["instances"].get(n, []):
                    jobs[(plan["sources"][h], tuple(flags))] = None
            return list(jobs)
    return None


def run_key(cfg, library: list[dict]) -> str:
    """What a row's search depends on besides its instance and the code: the configuration and the
    library (the run id of no instances; each instance is searched on its own, its random draws
    seeded by its name). Rows of one key and code, of instances of the same identity, are valid for
    any split of the instances over processes and calls."""
    from klineage.heldout.run import run_id_for
    return run_id_for([], cfg, library)


def seeded_rows(paths, run_id: str, code: str, key: str | None = None, identities: dict | None = None) -> list[dict]:
    """The decided rows (PASSED or FAILED) that code `code` decided in run `run_id`, or in any run of
    run key `key` (another split of the instances) where the row's instance had the identity
    `identities` gives it (name -> Instance.identity(): its workload file and start kernels), from
    the *.rows.json.gz files among `paths` (files or folders); later files win."""
    import gzip
    rows = {}
    for p in map(Path, paths):
        files = sorted(p.glob("*" + ROWS_SUFFIX)) if p.is_dir() else [p] if p.name.endswith(ROWS_SUFFIX) else []
        for f in files:
            with gzip.open(f, "rt") as fh:
                rec = json.load(fh)
            same_run = rec.get("run_id") == run_id  # the run id names every instance's identity
            if rec.get("code") != code or not (same_run or (key is not None and rec.get("run_key") == key)):
                continue
            seen = rec.get("identities") or {}
            for r in rec["rows"]:
                name = r["instance"]
                same_instance = same_run or (name in (identities or {}) and seen.get(name) == identities[name])
                if r["status"] in ("PASSED", "FAILED") and same_instance:
                    rows[(r["instance"], r["condition"])] = r
    return list(rows.values())


def shard(instances: list, spec: str | None) -> list:
    """Part K of N ("K/N", K from 1) of `instances`: every N-th by name, from the K-th. The parts of
    one N cover the instances once each; a part's rows seed a later call split otherwise (run_key)."""
    if not spec:
        return instances
    try:
        k, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise SystemExit(f"--shard {spec!r}: write K/N, e.g. 1/2 for the first of two parts") from None
    if not 1 <= k <= n:
        raise SystemExit(f"--shard {spec!r}: K must be 1 to N")
    return sorted(instances, key=lambda i: i.name)[k - 1::n]


REFERENCE_CACHE = "flaggems_config_cache.tar.gz"


def load_reference_cache(paths) -> Path:
    """Point FlagGems' cache at a folder of this call (FLAGGEMS_CACHE_DIR, which the gate workers
    inherit) and unpack into it the tuned configurations an earlier call of the run recorded
    (REFERENCE_CACHE among `paths`): every call then times the reference at the configuration the
    first call's autotuning chose, and skips the autotuning. Returns the folder."""
    import tarfile
    cache = Path(os.environ.setdefault("FLAGGEMS_CACHE_DIR", tempfile.mkdtemp(prefix="klineage-flaggems-")))
    if (cache / "config_cache").is_dir() and any((cache / "config_cache").iterdir()):
        # a folder several processes of one call share (heldout_h200_split.sh), unpacked once before them
        print(f"reference: FlagGems' tuned configurations already in {cache}", flush=True)
        return cache
    for p in map(Path, paths):
        f = p / REFERENCE_CACHE if p.is_dir() else p if p.name == REFERENCE_CACHE else None
        if f is not None and f.is_file():
            with tarfile.open(f) as tf:
                tf.extractall(cache, filter="data")
            print(f"reference: FlagGems' tuned configurations from {f}", flush=True)
            break
    return cache


def save_reference_cache(cache: Path, out: Path) -> bool:
    """Pack FlagGems' tuned configurations (cache/config_cache) into out/REFERENCE_CACHE; False when
    there are none."""
    import tarfile
    src = cache / "config_cache"
    if not src.is_dir() or not any(src.iterdir()):
        return False
    with tarfile.open(out / REFERENCE_CACHE, "w:gz") as tf:
        tf.add(src, arcname="config_cache")
    return True


def drop_records(path: Path, keys: set[str]) -> int:
    """Rewrite the evaluation records file `path` without the records whose eval_key is in `keys`
    (the same bytes for the same records); how many are left."""
    import gzip
    with gzip.open(path, "rt") as fh:
        lines = [line for line in fh if line.strip() and json.loads(line)["eval_key"] not in keys]
    path.write_bytes(gzip.compress("".join(lines).encode(), mtime=0))
    return len(lines)


def seeded_libraries(paths) -> set[str]:
    """The hashes of the library records among `paths` (files or folders)."""
    from klineage.heldout.records import LIBRARY_SUFFIX, read_library_record
    found = []
    for p in map(Path, paths):
        found += sorted(p.glob("*" + LIBRARY_SUFFIX)) if p.is_dir() else [p] if p.name.endswith(LIBRARY_SUFFIX) else []
    return {read_library_record(f)["hash"] for f in found}


def _recorded(paths):
    """Every evaluation record of the record files among `paths` (files or folders)."""
    import gzip
    from klineage.store.recorded import recorded_files
    for p in map(Path, paths):
        for f in (recorded_files(p) if p.is_dir() else [p] if p.name.endswith((".jsonl", ".jsonl.gz")) else []):
            with (gzip.open(f, "rt") if f.suffix == ".gz" else open(f)) as fh:
                yield from (json.loads(line) for line in fh if line.strip())


def seeded_gpus(paths) -> set[str]:
    """The GPU models of the recorded evaluations among `paths` (files or folders of earlier calls)."""
    return {r["gpu"] for r in _recorded(paths) if r.get("gpu")}


def recorded_keys(paths) -> set[str]:
    """The eval keys of the recorded evaluations among `paths`."""
    return {r["eval_key"] for r in _recorded(paths)}


def wall_table(folder: Path) -> str:
    """Markdown: the wall time each family took over the calls recorded in `folder` (each call's
    family_wall_s, the calls' whole wall time beside them). The processes of one split call
    (heldout_h200_split.sh: tags CALL_FAMILY or CALL_FAMILY-KofN) ran at once: the call's wall time,
    and a family's in that call when several processes shared it, is the longest."""
    runs = [json.loads(f.read_text()) for f in sorted(Path(folder).glob("heldout_h*_call*.json"))]
    per_call: dict[tuple[str, str], float] = {}
    calls: dict[str, float] = {}
    for c in runs:
        call = str(c.get("tag") or "").split("_")[0]
        for fam, w in (c.get("family_wall_s") or {}).items():
            per_call[(call, fam)] = max(per_call.get((call, fam), 0.0), w)
        calls[call] = max(calls.get(call, 0.0), c.get("wall_s") or 0.0)
    fams: dict[str, float] = {}
    for (_, fam), w in per_call.items():
        fams[fam] = fams.get(fam, 0.0) + w
    lines = ["| family | wall time over the calls |", "|---|---|"]
    lines += [f"| {fam} | {w:.0f} s |" for fam, w in fams.items()]
    lines.append(f"| all ({len(calls)} calls, start-up and export included) | {sum(calls.values()):.0f} s |")
    return "\n".join(lines)


def write_front_end_answers(path: Path, instances, cfg) -> int:
    """Ask nvcc's front end every question prebuild_jobs asks of these instances (their axes, the
    steered conditions' first two rounds, the prebuilt grids) and write the answers to `path`
    (klineage.gate.compile.export_front_end_answers)."""
    from klineage.gate.compile import export_front_end_answers
    from klineage.heldout.sources import skill_sources
    from klineage.store import open_store
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "lib.duckdb"
        shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
        store = open_store(db)
        try:
            lib = store.skills()
            prebuild_jobs(instances, cfg, lib, skill_sources(store, lib))
        finally:
            store.close()
    n = export_front_end_answers(path)
    print(f"front-end answers: {n} written to {path}", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="the output folder (required, but with --front-end-answers)")
    ap.add_argument("--config", type=Path, default=ROOT / "pipelines" / "heldout.toml")
    ap.add_argument("--db", type=Path, default=Path("/tmp/klineage_heldout_h200.duckdb"),
                    help="the run's database, a copy of the library made when missing (outside DIR: a warm machine's "
                         "next call resumes from it)")
    ap.add_argument("--families", default=None)
    ap.add_argument("--instances", default=None)
    ap.add_argument("--shard", default=None, metavar="K/N",
                    help="part K of N of the chosen instances (every N-th by name): one of N processes at once")
    ap.add_argument("--budget", type=int, default=None)
    ap.add_argument("--conditions", default=None)
    ap.add_argument("--vendor", choices=("auto", "primary", "fallback"), default=None)
    ap.add_argument("--seed-recorded", nargs="*", type=Path, default=[],
                    help="record files or folders of earlier calls to import first")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds; then export and exit 3")
    ap.add_argument("--prebuild", action="store_true", help="compile every kernel the run will gate first, in the "
                    "background beside the run (with --prebuild-wait: all of them before it starts)")
    ap.add_argument("--prebuild-wait", action="store_true")
    ap.add_argument("--build-jobs", type=int, default=None,
                    help="compile processes beside the run (default: the machine's cores less four)")
    ap.add_argument("--tag", default=None)
    ap.add_argument("--front-end-answers", type=Path, default=None, metavar="PATH",
                    help="write the nvcc front-end answers the plan asks (sweep_axes = \"buildable\": the axes, first "
                         "two rounds and prebuilt grids of the selected instances) to PATH (*.front_end.json.gz) and "
                         "exit: in the records folder, a device call with the same nvcc reads them instead of asking")
    ap.add_argument("--plan-pack", type=Path, default=None, metavar="DIR",
                    help="write the plan a device call prebuilds (heldout_plan.jobs.json.xz) and its nvcc front-end "
                         "answers (heldout_plan.front_end.json.gz) into DIR (the pipeline's records folder) and exit; "
                         "a CPU machine with nvcc")
    ap.add_argument("--wall-table", type=Path, default=None, metavar="DIR",
                    help="print the wall time each family took over the calls recorded in DIR (Markdown) and exit")
    ap.add_argument("--prefix", default=None,
                    help="the records' file prefix (default: heldout_h100 on an H100, else heldout_h200)")
    ns = ap.parse_args()
    if ns.wall_table is not None:
        print(wall_table(ns.wall_table))
        return 0
    if ns.out is None and ns.front_end_answers is None and ns.plan_pack is None:
        ap.error("--out is required")
    import dataclasses

    from klineage.gate.gate import Gate
    from klineage.heldout import load_instances, run_heldout, write_outputs
    from klineage.heldout.instances import fallback_hash
    from klineage.heldout.run import llm_status
    from klineage.heldout.sources import skill_sources
    from klineage.pipelines import load_pipeline
    from klineage.store import open_store
    from klineage.gate.compile import FRONT_END_SUFFIX, export_front_end_answers
    from klineage.heldout.records import LIBRARY_SUFFIX, write_library_record
    from klineage.store.recorded import import_paths, load_front_end

    split = lambda s: [x.strip() for x in s.split(",") if x.strip()] if s else None  # noqa: E731
    families, names = split(ns.families), split(ns.instances)
    tag = ns.tag or "_".join(names or families or ["all"]) + (f"-{ns.shard.replace('/', 'of')}" if ns.shard else "")
    t0 = time.perf_counter()
    hp = load_pipeline(ns.config).run
    over = {k: v for k, v in (("budget", ns.budget), ("vendor", ns.vendor)) if v is not None}
    if ns.conditions:
        over["conditions"] = tuple(split(ns.conditions))
    hp.config = dataclasses.replace(hp.config, **over)
    instances = shard(load_instances(hp.root, families, names), ns.shard)
    if ns.front_end_answers is not None:
        return write_front_end_answers(ns.front_end_answers, instances, hp.config)
    if ns.plan_pack is not None:
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(ROOT / "skills_db" / "skills.duckdb", Path(tmp) / "lib.duckdb")
            store = open_store(Path(tmp) / "lib.duckdb")
            try:
                lib = store.skills()
                got = plan_pack(ns.plan_pack, instances, hp.config, lib, skill_sources(store, lib))
            finally:
                store.close()
        print("plan:", json.dumps(got), flush=True)
        return 0
    ns.out.mkdir(parents=True, exist_ok=True)
    env = environment()
    prefix = ns.prefix or card_prefix(env["nvidia_smi"])
    (ns.out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    print("environment:", json.dumps(env), flush=True)
    here = env["nvidia_smi"].split(",")[0].strip()
    other = sorted(g for g in seeded_gpus(ns.seed_recorded) if g != here)
    if other and not os.environ.get("KLINEAGE_ALLOW_MIXED_GPUS"):
        print(f"refused: the seeded records were measured on {', '.join(other)}, this machine is {here}: a run's "
              "calls must all run on one GPU model (ask the device for that kind), or seed none", flush=True)
        return 2
    # answers recorded by this nvcc (the plan's, earlier calls'): the sweep's axes without asking again
    print(f"front-end answers: {load_front_end(list(dict.fromkeys(map(Path, hp.records + list(ns.seed_recorded)))))} loaded", flush=True)
    reference_cache = load_reference_cache(list(ns.seed_recorded))
    db = ns.db
    if not db.exists():
        shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    store = open_store(db)
    refuse_harness_errors(store)
    seeded = import_paths(store, ns.seed_recorded) if ns.seed_recorded else None
    # in the run's own records folder already (the calls before): not exported again; whatever else this
    # call used, measured or imported from elsewhere, goes into its file, so the folder replays alone
    seeded_keys = recorded_keys(hp.records) if ns.seed_recorded else set()
    hashes = sorted({i.workload.content_hash for i in instances}
                    | {fallback_hash(i.workload.content_hash) for i in instances if i.has_fallback})
    from klineage.heldout.run import run_id_for
    code = code_hash()
    lib = store.skills()
    run_id = run_id_for(instances, hp.config, lib)
    key = run_key(hp.config, lib)
    identities = {i.name: i.identity() for i in instances}
    rows_in = seeded_rows(ns.seed_recorded, run_id, code, key, identities)
    if rows_in:  # decided by an earlier call of this run with this code: not searched again
        store.put_heldout_run({"run_id": run_id, "root": str(hp.root), "config": hp.config.to_dict(), "status": "running"})
        for r in rows_in:
            store.put_heldout_result(run_id, r)
    decided = {(r["instance"], r["condition"]) for r in rows_in}
    llm, reason = llm_status(False, hp.config.model, hp.config.budget_usd)
    runnable = [c for c in hp.config.conditions if c != "llm" or llm is not None]  # the rest: NOT_RUN at once
    todo = [i for i in instances if any((i.name, c) not in decided for c in runnable)]
    print(f"rows: {len(rows_in)} decided by earlier calls of run {run_id}; {len(todo)} of {len(instances)} "
          "instances left", flush=True)
    pre = None
    background = None
    structural_build = None
    if ns.prebuild:
        planned = read_plan(hp.records + list(ns.seed_recorded), [i.name for i in todo])
        if planned is not None:
            background = BackgroundBuild(planned, ns.build_jobs)
            print(f"prebuild: {len(background.futures)} planned kernels of {len(todo)} instances in the background",
                  flush=True)
        elif ns.prebuild_wait:
            pre = prebuild(todo, hp.config, lib, skill_sources(store, lib))
            print("prebuild:", pre, flush=True)
        else:
            if hp.config.structural:
                structural_build = StructuralBuild(hp.root, todo, hp.config, lib, skill_sources(store, lib))
                print(f"prebuild: structural paths of {len(todo)} instances in a process of their own", flush=True)
            background = BackgroundBuild(prebuild_jobs(todo, hp.config, lib, skill_sources(store, lib)), ns.build_jobs)
            print(f"prebuild: {len(background.futures)} kernels in the background", flush=True)

    def stop(*_):
        raise TimeLimit
    signal.signal(signal.SIGTERM, stop)
    if ns.time_limit:
        signal.signal(signal.SIGALRM, stop)
        signal.setitimer(signal.ITIMER_REAL, max(1.0, ns.time_limit - (time.perf_counter() - t0)))
    gate = Gate(store, hp.config.gate_config())

    walls: dict[str, float] = {}
    mark, current = [time.perf_counter()], [None]

    def progress(event, **kw):
        current[0] = kw.get("instance") or (kw.get("row") or {}).get("instance") or current[0]
        if event == "row":
            r = kw["row"]
            now = time.perf_counter()  # the call's time, cut at each row: what each instance took
            walls[r["instance"]] = walls.get(r["instance"], 0.0) + now - mark[0]
            mark[0] = now
            sp = f"{r['speedup']:.3f}x {r.get('ci95')}" if r.get("speedup") else ""
            print(f"{time.perf_counter() - t0:7.1f}s {r['instance']} {r['condition']}: {r['status']} {sp} "
                  f"{(r.get('reason') or '')[:160]}", flush=True)

    cut, report, failure = False, None, None
    try:
        report = run_heldout(store, gate, instances, hp.config, hp.root, llm=llm, llm_reason=reason, progress=progress)
        if rows_in:  # the kernels of rows taken as decided are not in this database: the CPU replay writes it
            print("report: rows of earlier calls were taken as decided; the report is written by the replay of "
                  "the records on any machine (docs/heldout.md)", flush=True)
        else:
            write_outputs(report, store, ns.out / "report")
    except TimeLimit:
        cut = True
        print("time limit: stopping and exporting what was measured", flush=True)
    except HarnessFault as exc:
        failure = f"harness fault: {exc}"
        print("stopped at a harness fault (a gate bug, not a kernel result):", exc, flush=True)
    except Exception as exc:  # a bug or a lost device: keep what was measured, then fail
        failure = f"{type(exc).__name__}: {exc}"
        print("failed:", failure, flush=True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if current[0] is not None:  # the instance the call stopped in (or finished with) gets the time since
            walls[current[0]] = walls.get(current[0], 0.0) + time.perf_counter() - mark[0]
        if background is not None:
            pre = background.stop()
            print("prebuild:", pre, flush=True)
        if structural_build is not None:
            pre = {**(pre or {}), "structural": structural_build.stop()}
            print("prebuild (structural):", pre["structural"], flush=True)
        try:
            gate.close()
        except Exception:  # noqa: BLE001 - closing a worker must not lose the export
            pass
        # this call's evaluations: those the calls before recorded are in their own files already
        n = store.export_evaluations(ns.out / f"{prefix}_{tag}.jsonl.gz", workload_hashes=hashes)
        n = drop_records(ns.out / f"{prefix}_{tag}.jsonl.gz", seeded_keys) if seeded_keys else n
        # every front-end answer the run used, which a replay needs to choose the same sweep axes
        n_fe = export_front_end_answers(ns.out / f"{prefix}_{tag}{FRONT_END_SUFFIX}")
        # the library the run measured and the corpus its audit read, so a replay stands when they change
        # (one record: a call seeded with the same library's record writes none)
        library = write_library_record(store, ns.out / f"{prefix}_{tag}{LIBRARY_SUFFIX}")
        if library["hash"] in seeded_libraries(ns.seed_recorded):
            (ns.out / f"{prefix}_{tag}{LIBRARY_SUFFIX}").unlink()
        save_reference_cache(reference_cache, ns.out)
        rows_out = [r for r in store.heldout_results(run_id) if r["status"] in ("PASSED", "FAILED")]
        import gzip
        with gzip.open(ns.out / f"{prefix}_{tag}{ROWS_SUFFIX}", "wt") as fh:
            json.dump({"run_id": run_id, "run_key": key, "identities": identities, "code": code, "rows": rows_out}, fh,
                      sort_keys=True)
        store.close()
    fam_of = {i.name: i.family for i in instances}
    by_family: dict[str, float] = {}
    for inst, w in walls.items():
        by_family[fam_of[inst]] = by_family.get(fam_of[inst], 0.0) + w
    record = {"benchmark": "heldout_h200", "args": {k: str(v) for k, v in vars(ns).items()}, "tag": tag,
              "config": hp.config.to_dict(), "instances": [i.name for i in instances], "environment": env,
              "seeded_from_recorded": seeded, "prebuild": pre, "exported_evaluations": n,
              "exported_front_end_answers": n_fe, "library": library,
              "cut_by_time_limit": cut, "failure": failure, "wall_s": round(time.perf_counter() - t0, 1),
              "rows_seeded": len(rows_in), "rows_decided": len(rows_out), "code": code,
              "instance_wall_s": {k: round(v, 1) for k, v in walls.items()},
              "family_wall_s": {k: round(v, 1) for k, v in sorted(by_family.items())},
              "run_id": report["run_id"] if report else None,
              "verdict": report["summary"]["verdict"] if report else None}
    (ns.out / f"{prefix}_{tag}.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(f"exported {n} evaluations; wall {record['wall_s']} s", flush=True)
    if report:
        from klineage.report.text import format_heldout
        print(format_heldout(report), flush=True)
    return 3 if cut else (1 if failure else 0)


if __name__ == "__main__":
    raise SystemExit(main())
