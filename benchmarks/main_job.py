"""The main job's CPU time and peak memory on the machine in hand, and the compiler evidence it reads.

The main job is the README's: `klineage run pipelines/mine.toml --replay --db DB`, from a fresh
build cache (what a fresh clone has). `measure` runs it in a child process and records, from the
kernel's accounting of that process and every process it started (nvcc, ptxas), the CPU seconds
(user + system) and the peak resident memory, with its own summary of the nvcc and ptxas runs, in
benchmarks/results/main_job_cpu.json; the README's figure is that record's (tests/test_main_job.py
checks both). `record-ptx` runs the job in this process keeping the compiler evidence it used (PTX
with line info and ptxas's report per kernel) and writes it to the corpus
(skills_db/compiler/corpus_sm_90a.ptx.jsonl.xz), which a replay then reads instead of running nvcc.

    python benchmarks/main_job.py measure [--out benchmarks/results/main_job_cpu.json]
    python benchmarks/main_job.py record-ptx [--out skills_db/compiler/corpus_sm_90a.ptx.jsonl.xz]

Run `record-ptx` after a change that alters the kernels the job compiles (the shipped-library test says
when: a replay that ran nvcc), then `measure`. Each takes minutes on two cores; run them with nice.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RECORD = ROOT / "benchmarks" / "results" / "main_job_cpu.json"
PTX_RECORD = ROOT / "skills_db" / "compiler" / "corpus_sm_90a.ptx.jsonl.xz"
COMMAND = ["run", "pipelines/mine.toml", "--replay", "--db"]
GOAL = {"cpu_s": 300.0, "peak_rss_mb": 1024.0}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_head() -> str | None:
    r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def measure(out: Path) -> dict:
    """Run the main job in a child process from a fresh build cache; write and return the record."""
    with tempfile.TemporaryDirectory(prefix="klineage-main-job-") as tmp:
        db = Path(tmp) / "klineage.duckdb"
        env = {k: v for k, v in os.environ.items() if not k.startswith("KLINEAGE_")}
        env.update(KLINEAGE_HOME=str(Path(tmp) / "home"), PYTHONPATH=str(ROOT))
        cmd = [sys.executable, "-m", "klineage.cli", *COMMAND, str(db), "--quiet", "--json"]
        load = os.getloadavg()
        t0 = time.perf_counter()
        with open(Path(tmp) / "stdout", "w+") as so, open(Path(tmp) / "stderr", "w+") as se:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=so, stderr=se)
            _, status, ru = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
            so.seek(0)
            se.seek(0)
            stdout, stderr = so.read(), se.read()
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            raise SystemExit(f"the main job exited {code}:\n{stderr[-3000:]}")
        result = json.loads(stdout)["result"]
        from klineage.store import open_store
        with open_store(db, read_only=True) as s, open_store(ROOT / "skills_db" / "skills.duckdb", read_only=True) as shipped:
            same = s.library_hash() == shipped.library_hash()
    rec = {
        "command": "klineage " + " ".join(COMMAND) + " DB (a fresh build cache)",
        "regenerate": "nice -n 10 python benchmarks/main_job.py measure",
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 1), "user_s": round(ru.ru_utime, 1), "system_s": round(ru.ru_stime, 1),
        "peak_rss_mb": round(ru.ru_maxrss / 1024, 1),  # Linux reports KiB: the largest of the job and its children
        "wall_s": round(wall, 1),
        "nvcc": result["nvcc"], "evaluations": result["evaluations"]["total"], "skills": len(result["skills"]),
        "library_equals_shipped": same,
        "goal": GOAL,
        "machine": {"cpus": os.cpu_count(), "cpu_model": _cpu_model(), "load_average_at_start": [round(x, 2) for x in load],
                    "python": platform.python_version()},
        "commit": _git_head(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return rec


def record_ptx(out: Path) -> int:
    """Run the main job in this process (a temporary database, this machine's build cache) keeping
    the compiler evidence it reads, and write it to `out`; how many kernels it holds."""
    from klineage.cli import main
    from klineage.gate.compile import collect_ptx, export_ptx_records
    collect_ptx(True)
    with tempfile.TemporaryDirectory(prefix="klineage-ptx-") as tmp:
        try:
            main([*COMMAND, str(Path(tmp) / "klineage.duckdb"), "--quiet"], standalone_mode=False)
        except SystemExit as e:  # a replay that lacks records exits 4: the record would be incomplete
            if e.code:
                raise
    return export_ptx_records(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("measure", help="run the main job and record its CPU time and peak memory")
    m.add_argument("--out", type=Path, default=RECORD)
    r = sub.add_parser("record-ptx", help="write the compiler evidence the main job reads into the corpus")
    r.add_argument("--out", type=Path, default=PTX_RECORD)
    args = ap.parse_args()
    os.chdir(ROOT)
    if args.what == "measure":
        rec = measure(args.out)
        print(f"main job: {rec['cpu_s']:.0f} CPU s ({rec['user_s']:.0f} user, {rec['system_s']:.0f} system), peak "
              f"{rec['peak_rss_mb']:.0f} MB, wall {rec['wall_s']:.0f} s on {rec['machine']['cpus']} CPUs; nvcc and ptxas "
              f"runs {rec['nvcc']['total']['runs']}; library equals the shipped one: {rec['library_equals_shipped']}; "
              f"wrote {args.out}")
    else:
        print(f"wrote {record_ptx(args.out)} kernels' compiler evidence to {args.out}")


if __name__ == "__main__":
    main()
