"""Mutation testing of the checks the evidence rests on, with mutmut (`pip install -e '.[mutation]'`).

Each target is a module, or functions of one, that decides whether a result counts: the gate's
correctness rule, the audit of a step, admission's effect labels, the re-derivation threshold, and
the workload contract's input seeding and check hook. For each, mutmut writes every small change
its operators know (a comparison flipped, a constant moved, an argument dropped, a string changed)
and runs a small, fast selection of the tests on each mutant; a mutant is killed when a test fails.
A mutant that survives is either a gap in the tests (a test is added for it) or changes nothing the
code can observe: those are listed in EQUIVALENT with the reason, keyed by the changed lines.

    python benchmarks/mutation.py --out DIR [--target NAME ...] [--jobs N]

Each target runs in a copy of the working tree (tracked files and untracked ones git does not
ignore) under a temporary folder, so the checkout is never mutated. It writes DIR/mutation.json:
per target the module, the functions, the tests, per mutant its name, status (killed, survived,
equivalent, no tests, timeout) and the change, and the killed fraction; and DIR/mutation.log. The
record is benchmarks/results/mutation.json (tests/test_mutation_record.py reads it). Not part of CI:
about 20 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTMUT_STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped",
                 36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout", None: "not checked"}
# what the tests read besides klineage/ and tests/ (mutmut copies them beside the mutated package)
ALSO_COPY = ["expert_kernels", "apply_workloads", "heldout", "style_gallery", "pipelines", "benchmarks", "skills_db",
             "docs", "README.md"]


@dataclass
class Target:
    name: str
    module: list[str]  # candidate paths, the first that exists is mutated (a module may move)
    functions: list[str] = field(default_factory=list)  # "f" or "Class.method"; [] = the whole module
    tests: list[str] = field(default_factory=list)  # pytest node ids or files, fast ones
    why: str = ""

    def path(self, root: Path) -> str:
        for p in self.module:
            if (root / p).is_file():
                return p
        raise FileNotFoundError(f"{self.name}: none of {self.module} exists")


TARGETS = [
    Target("correctness", ["klineage/gate/correctness.py"], [],
           ["tests/gate/test_correctness_rule.py", "tests/gate/test_correctness.py::test_atol_scales_with_magnitude",
            "tests/gate/test_correctness.py::test_matched_fraction_threshold",
            "tests/gate/test_correctness.py::test_matching_infinity_passes_only_with_same_sign",
            "tests/gate/test_correctness.py::test_shape_mismatch"],
           "the rule every output is judged by, and the negative controls that show a tolerance is tight"),
    Target("audit", ["klineage/mechanisms/audit.py", "klineage/lineage/audit.py"], [],
           ["tests/mechanisms/test_audit_rules.py"],
           "exactly one mechanism removed, every other kept: what makes a step a step"),
    Target("admission labels", ["klineage/lineage/admit.py"], ["_trial_ratios", "outcome", "_key"],
           ["tests/lineage/test_admission_labels.py"],
           "faster / neutral / slower per case against the noise, and a trial's common label"),
    Target("re-derivation threshold", ["klineage/lineage/walk.py"], ["rederive_trials"],
           ["tests/lineage/test_rederive_threshold.py"],
           "a step is accepted only if re-deriving it reaches 0.99 of the richer kernel in every trial"),
    Target("workload inputs and check", ["klineage/workload.py"], ["Workload.make_inputs", "Workload.check"],
           ["tests/test_workload_contract.py", "tests/test_workload.py::test_make_inputs_deterministic_and_seed_dependent",
            "tests/test_workload.py::test_optional_check_hook"],
           "the inputs every evaluation draws (seeded) and the workload's own output check"),
]

# Mutants that change nothing the code can observe, keyed by (target, the changed lines of the
# mutant: "-old" and "+new", stripped). Each says why.
INF = 'float("INF") is float("inf"): Python reads the name case-insensitively'
ODTYPE = ("the output keeps its dtype: every figure computed from it meets the float64 reference (type "
          "promotion), and the rest reads predicates (finite, infinite, sign) or an element's value, which "
          "the dtype does not change")
RDEV = ("the reference stays on its own device, which for every caller is the output's (the worker computes "
        "both on the GPU, the tests on the CPU)")
RSELF = "the reference moved to its own device: a no-op either way"
RMS = ("with no finite reference value the masked values are all zero and their rms is 0.0, the value the "
       "guard gives (an empty tensor has returned earlier)")
ZDTYPE = "zeros of the default dtype: compare() reads every output in float64, and 0.0 is exact in any"
ZDEV = ("zeros on the default device: compare() moves the reference to the output's device and the figures "
        "are the same")
VDTYPE = "the input's leading values keep their dtype: compare() reads them in float64, exactly"
PAD0 = "when the input holds exactly as many values as the output, padding with none changes nothing"
VDEV = "the copy stays on the input's device, which is the reference's"
UNREAD = ("the reason given with evidence that was found is never read: callers read it only when no "
          "evidence was found")
SPAN = ("a rules step reaches this line only when exactly the removed (mechanism, locus) is gone, so that "
        "feature is in the list: `next` never falls back and the span is never None")
EQUALMAP = ("for an equal block both formulas give the same line: i1 + 1 + (j - j1) never exceeds i2 there, "
            "so the other branch's min() returns it")
FALSY = "`here` is read only through `not`: None and False are alike"
DEAD = ("the last branch of _compiled_changes is unreachable: a family neither kernel's source holds whose "
        "compiled presence changes is caught by the `removed` or `added` branch above it under the same "
        "condition, so no change inside it is observable")
NONE_FALSE = "difflib reads `autojunk` for its truth: None is False"
DEFAULT1 = "only the second field of a missing entry's default is read, and it is False either way"
_CMP = '-return Comparison(False, out.numel(), 0.0, out.numel(), 0, float("inf"), float("inf"), 0.0,'
_ZEROS = "-fake = torch.zeros(dims, dtype=torch.float64, device=ref.device)"
_R = "-r = ref.detach().to(ref.device).to(torch.float64).flatten().to(o.device)"
EQUIVALENT: dict[tuple[str, tuple[str, ...]], str] = {
    ("correctness", (_CMP, '+return Comparison(False, out.numel(), 0.0, out.numel(), 0, float("INF"), float("inf"), 0.0,')): INF,
    ("correctness", (_CMP, '+return Comparison(False, out.numel(), 0.0, out.numel(), 0, float("inf"), float("INF"), 0.0,')): INF,
    ("correctness", ('-err = torch.where(nonfinite_bad, float("inf"), err)',
                     '+err = torch.where(nonfinite_bad, float("INF"), err)')): INF,
    ("correctness", ('-max_abs = float(finite_err.max()) if nonfinite == 0 else float("inf")',
                     '+max_abs = float(finite_err.max()) if nonfinite == 0 else float("INF")')): INF,
    ("correctness", ('-max_rel = float(torch.where(finite_r, rel, 0.0).max()) if nonfinite == 0 else float("inf")',
                     '+max_rel = float(torch.where(finite_r, rel, 0.0).max()) if nonfinite == 0 else float("INF")')): INF,
    ("correctness", ("-o = out.detach().to(torch.float64).flatten()", "+o = out.detach().to(None).flatten()")): ODTYPE,
    ("correctness", (_R, "+r = ref.detach().to(ref.device).to(torch.float64).flatten().to(None)")): RDEV,
    ("correctness", (_R, "+r = ref.detach().to(None).to(torch.float64).flatten().to(o.device)")): RSELF,
    ("correctness", ("-rms = float(torch.sqrt(torch.mean(torch.where(finite_r, r, 0.0) ** 2))) if bool(finite_r.any()) else 0.0",
                     "+rms = float(torch.sqrt(torch.mean(torch.where(finite_r, r, 0.0) ** 2))) if (bool(finite_r.any())) or True else 0.0")): RMS,
    ("correctness", (_ZEROS, "+fake = torch.zeros(dims, dtype=None, device=ref.device)")): ZDTYPE,
    ("correctness", (_ZEROS, "+fake = torch.zeros(dims, device=ref.device)")): ZDTYPE,
    ("correctness", (_ZEROS, "+fake = torch.zeros(dims, dtype=torch.float64, device=None)")): ZDEV,
    ("correctness", (_ZEROS, "+fake = torch.zeros(dims, dtype=torch.float64, )")): ZDEV,
    ("correctness", ("-vals = first_in[:n].to(torch.float64)", "+vals = first_in[:n].to(None)")): VDTYPE,
    ("correctness", ("-if vals.numel() < n:", "+if vals.numel() <= n:")): PAD0,
    ("correctness", ("-fake = vals.reshape(dims).to(ref.device)", "+fake = vals.reshape(dims).to(None)")): VDEV,
    ("audit", ('-return ev, ""', '+return ev, "XXXX"')): UNREAD,
    ("audit", ("-for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, rich, simple, autojunk=False).get_opcodes():",
               "+for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, rich, simple, autojunk=None).get_opcodes():")):
        NONE_FALSE,
    ("audit", ('-return eb, ea, ""', '+return eb, ea, "XXXX"')): UNREAD,
    ("audit", ('-span = next((f.lines for f in before if f.key == (mechanism, locus)), None)', '+span = next((f.lines for f in before if f.key == (mechanism, locus)), )')): SPAN,
    ("audit", ('-_at_change(eb, ea, span) if span is not None else None)', '+_at_change(eb, ea, span) if (span is not None) or True else None)')): SPAN,
    ("audit", ('-back[j + 1] = i1 + (j - j1) + 1 if tag == "equal" else min(i1 + 1 + (j - j1), max(i2, i1 + 1))', '+back[j + 1] = i1 + (j - j1) + 1 if (tag == "equal") and False else min(i1 + 1 + (j - j1), max(i2, i1 + 1))')): EQUALMAP,
    ("audit", ('-back[j + 1] = i1 + (j - j1) + 1 if tag == "equal" else min(i1 + 1 + (j - j1), max(i2, i1 + 1))', '+back[j + 1] = i1 + (j - j1) + 1 if tag == "XXequalXX" else min(i1 + 1 + (j - j1), max(i2, i1 + 1))')): EQUALMAP,
    ("audit", ('-back[j + 1] = i1 + (j - j1) + 1 if tag == "equal" else min(i1 + 1 + (j - j1), max(i2, i1 + 1))', '+back[j + 1] = i1 + (j - j1) + 1 if tag == "EQUAL" else min(i1 + 1 + (j - j1), max(i2, i1 + 1))')): EQUALMAP,
    ("audit", ('-here = at_change or (lambda key, side: False)', '+here = at_change or (lambda key, side: None)')): FALSY,
    ("audit", ('-elif not sb and not sa and cb != ca and not (own and cb) and not here(key, "before" if cb else "after"):', '+elif not sb and not sa and cb != ca and not (own or cb) and not here(key, "before" if cb else "after"):')): DEAD,
    ("audit", ('-out["removed" if cb else "added"].append(key)', '+out["removed" if cb else "added"].append(None)')): DEAD,
    ("audit", ('-out["removed" if cb else "added"].append(key)', '+out["removed" if (cb) and False else "added"].append(key)')): DEAD,
    ("audit", ('-out["removed" if cb else "added"].append(key)', '+out["removed" if (cb) or True else "added"].append(key)')): DEAD,
    ("audit", ('-out["removed" if cb else "added"].append(key)', '+out["XXremovedXX" if cb else "added"].append(key)')): DEAD,
    ("audit", ('-out["removed" if cb else "added"].append(key)', '+out["REMOVED" if cb else "added"].append(key)')): DEAD,
    ("audit", ('-out["removed" if cb else "added"].append(key)', '+out["removed" if cb else "XXaddedXX"].append(key)')): DEAD,
    ("audit", ('-out["removed" if cb else "added"].append(key)', '+out["removed" if cb else "ADDED"].append(key)')): DEAD,
    ("audit", ('-differ = sorted(key for key in po.keys() | pr.keys() if po.get(key, (False, False))[1] != pr.get(key, (False, False))[1])', '+differ = sorted(key for key in po.keys() | pr.keys() if po.get(key, (True, False))[1] != pr.get(key, (False, False))[1])')): DEFAULT1,
    ("audit", ('-differ = sorted(key for key in po.keys() | pr.keys() if po.get(key, (False, False))[1] != pr.get(key, (False, False))[1])', '+differ = sorted(key for key in po.keys() | pr.keys() if po.get(key, (False, False))[1] != pr.get(key, (True, False))[1])')): DEFAULT1,
}


def _log(fh, msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    fh.write(line + "\n")
    fh.flush()


def mangled(module_path: str, function: str) -> str:
    """The glob of mutmut's names for the mutants of `function` ("f" or "Class.method") in a module."""
    mod = module_path.removesuffix(".py").replace("/", ".")
    if "." in function:
        cls, meth = function.split(".", 1)
        return f"{mod}.x\u01c1{cls}\u01c1{meth}__mutmut_*"
    return f"{mod}.x_{function}__mutmut_*"


def change_of(diff: str) -> tuple[str, ...]:
    """The changed lines of a mutant's diff, "-old" / "+new", stripped of indentation."""
    return tuple(ln[0] + ln[1:].strip() for ln in diff.splitlines()
                 if ln[:1] in "+-" and not ln.startswith(("+++", "---")))


def copy_tree(dest: Path) -> None:
    """The working tree's tracked files and the untracked ones git does not ignore, into `dest`."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def mutmut_config(path: str, tests: list[str], jobs: int) -> str:
    q = lambda xs: "[" + ", ".join(json.dumps(x) for x in xs) + "]"  # noqa: E731
    return ("\n[tool.mutmut]\n"
            f"source_paths = [\"klineage\"]\nonly_mutate = {q([path])}\nalso_copy = {q(ALSO_COPY)}\n"
            f"pytest_add_cli_args_test_selection = {q(tests)}\n"
            "pytest_add_cli_args = [\"-p\", \"no:cacheprovider\", \"-x\", \"-q\"]\n"
            # each mutant's tests run in a process forked from the one that ran them all once (torch
            # warm); with one OpenMP / MKL thread (run_target's environment) no thread pool is forked
            "process_isolation = \"fork\"\n"
            # a loaded machine (2 cores, other work beside) must not turn a slow test into a `timeout`
            "timeout_multiplier = 60.0\ntimeout_constant = 20.0\n")


def run_target(t: Target, work: Path, jobs: int, log) -> dict:
    tree = work / re.sub(r"\W+", "_", t.name)
    tree.mkdir(parents=True)
    copy_tree(tree)
    path = t.path(tree)
    with (tree / "pyproject.toml").open("a") as fh:
        fh.write(mutmut_config(path, t.tests, jobs))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    globs = [mangled(path, f) for f in t.functions]
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "mutmut", "run", *(["--max-children", str(jobs)] if jobs else []),
                        *globs], cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (work / f"{tree.name}.mutmut.log").write_text(r.stdout[-20000:] + "\n" + r.stderr[-20000:])
    meta = json.loads((tree / "mutants" / (path + ".meta")).read_text())
    codes = {k: v for k, v in meta["exit_code_by_key"].items()
             if not globs or any(_fnmatch(k, g) for g in globs)}
    mutants = []
    for name, code in sorted(codes.items(), key=lambda kv: _order(kv[0])):
        status = MUTMUT_STATUS.get(code, "suspicious")
        entry = {"name": name, "status": status}
        if status != "killed":
            shown = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=tree, env=env,
                                   capture_output=True, text=True).stdout
            entry["change"] = list(change_of(shown))
        mutants.append(entry)
    source = (tree / path).read_bytes()
    out = classify({**asdict(t), "module": path, "module_sha256": hashlib.sha256(source).hexdigest(),
                    "mutmut_rc": r.returncode, "wall_s": round(wall, 1), "mutants": mutants})
    log(f"{t.name} ({path}{': ' + ', '.join(t.functions) if t.functions else ''}): {len(mutants)} mutants, "
        f"{out['counts']}, killed {out['killed_fraction'] if mutants else 'n/a'}, {wall:.0f} s")
    for m in mutants:
        if m["status"] not in ("killed", "equivalent"):
            log(f"   {m['status']}: {m['name']}: {' | '.join(m.get('change', []))[:300]}")
    return out


def classify(target: dict) -> dict:
    """A target's record with each survivor that EQUIVALENT explains marked `equivalent` (with the
    reason), one it no longer explains `survived` again, and its counts and killed fraction."""
    for m in target["mutants"]:
        if m["status"] in ("survived", "equivalent"):
            why = EQUIVALENT.get((target["name"], tuple(m.get("change", ()))))
            m.pop("why", None)
            m["status"] = "equivalent" if why else "survived"
            if why:
                m["why"] = why
    counts: dict[str, int] = {}
    for m in target["mutants"]:
        counts[m["status"]] = counts.get(m["status"], 0) + 1
    target["counts"] = counts
    target["killed_fraction"] = counts.get("killed", 0) / len(target["mutants"]) if target["mutants"] else None
    return target


def summarize(targets: list[dict]) -> dict:
    every = [m for t in targets for m in t["mutants"]]
    return {"mutants": len(every), **{s: sum(m["status"] == s for m in every) for s in sorted({m["status"] for m in every})}}


def reclassify(path: Path, argv: list[str]) -> None:
    """Apply EQUIVALENT as it is now to a record's survivors, without running mutmut again (after a
    survivor is explained); the record keeps the command that did it."""
    rec = json.loads(path.read_text())
    rec["targets"] = [classify(t) for t in rec["targets"]]
    rec["summary"] = summarize(rec["targets"])
    rec.setdefault("reclassified", []).append({"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                               "command": " ".join(["python", "benchmarks/mutation.py", *argv])})
    path.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"{path}: {rec['summary']}")


def _fnmatch(name: str, glob: str) -> bool:
    import fnmatch
    return fnmatch.fnmatchcase(name, glob)


def _order(name: str) -> tuple[str, int]:
    base, _, n = name.rpartition("__mutmut_")
    return base, int(n) if n.isdigit() else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--target", action="append", default=[], help="a target's name (default: all)")
    ap.add_argument("--jobs", type=int, default=0, help="mutmut's --max-children (default: its own choice)")
    ap.add_argument("--keep", action="store_true", help="keep the working copies (printed) for `mutmut show`")
    ap.add_argument("--reclassify", type=Path, help="a record (mutation.json) to apply EQUIVALENT to again, "
                    "without running mutmut; --out is not written")
    ns = ap.parse_args(argv)
    if ns.reclassify:
        reclassify(ns.reclassify, argv if argv is not None else sys.argv[1:])
        return 0
    try:
        import mutmut  # noqa: F401
    except ImportError:
        ap.error("mutmut is not installed: pip install -e '.[mutation]'")
    names = {t.name for t in TARGETS}
    bad = [n for n in ns.target if n not in names]
    if bad:
        ap.error(f"unknown target {bad}: one of {sorted(names)}")
    ns.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="klineage-mutation-"))
    fh = (ns.out / "mutation.log").open("w")
    log = lambda msg: _log(fh, msg)  # noqa: E731
    import mutmut
    result = {"benchmark": "mutation", "tool": f"mutmut {mutmut.__version__}",
              "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "command": " ".join(["python", "benchmarks/mutation.py", *(argv if argv is not None else sys.argv[1:])]),
              "targets": []}
    try:
        for t in TARGETS:
            if ns.target and t.name not in ns.target:
                continue
            result["targets"].append(run_target(t, work, ns.jobs, log))
    finally:
        if ns.keep:
            log(f"working copies kept under {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    result["summary"] = summarize(result["targets"])
    log(f"summary: {result['summary']}")
    (ns.out / "mutation.json").write_text(json.dumps(result, indent=1) + "\n")
    fh.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
