"""The held-out check's statistics: speedups with 95% intervals from repeated timing, geomeans that
count failures, and comparisons of two conditions beyond the timing noise.

Speedup of one kernel over its reference, per benchmark shape: the gate times the candidate and the
reference alternately, call by call, in the same worker, in T trials; trial i gives one candidate
median and one reference median over the same calls. The paired ratio of trial i is
reference_median_i / candidate_median_i. Over the final rounds (each a separate worker process) a
shape has n = rounds x T such ratios; its speedup is their geometric mean and its 95% interval the
Student t interval of their logarithms, exp(mean +- t(0.975, n-1) * sd / sqrt(n)). An instance with
several benchmark shapes takes the mean of the shapes' log speedups, its variance the sum of their
variances of the mean over S^2, and df the smallest n - 1. The interval is over timing trials only:
it says how well the speedup of this kernel is measured, not how it would vary over instances.
Sums of floats are exactly rounded (math.fsum), so a replay gives the same bits on every Python.
"""
from __future__ import annotations

import math

# t(0.975, df) for df = 1..30; beyond 30 the normal 1.96 is within 4%.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def t975(df: int) -> float:
    """The two-sided 95% Student t critical value for `df` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError(f"df must be at least 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96


def log_mean_var(values: list[float]) -> tuple[float, float, int]:
    """(mean of logs, variance of that mean, n) of positive values; the variance is 0 for n = 1."""
    logs = [math.log(v) for v in values]
    n = len(logs)
    m = math.fsum(logs) / n
    var = math.fsum((x - m) ** 2 for x in logs) / (n - 1) if n > 1 else 0.0
    return m, var / n, n


def shape_speedup(timings: list[dict]) -> dict:
    """One benchmark shape over the final rounds' timing entries (the gate's per-shape timing
    dicts): {speedup, ci95, n, trial_ratios, latency_us, reference_us, gate_speedups}."""
    ratios, cand, ref = [], [], []
    for tm in timings:
        c = tm["trial_medians_us"]
        v = tm.get("vendor_trial_medians_us") or [tm["vendor_latency_us"]] * len(c)
        ratios += [vi / ci for vi, ci in zip(v, c)]
        cand += list(c)
        ref += list(v)
    m, var, n = log_mean_var(ratios)
    half = t975(n - 1) * math.sqrt(var) if n > 1 else math.inf
    out = {"speedup": math.exp(m), "ci95": [math.exp(m - half), math.exp(m + half) if half != math.inf else None],
           "n": n, "log_mean": m, "log_var": var, "trial_ratios": ratios,
           "latency_us": _median(cand), "reference_us": _median(ref),
           "gate_speedups": [tm.get("speedup_vs_vendor") for tm in timings]}
    host = host_dispatch(timings)
    if host:
        out["host_dispatch"] = host
    return out


def host_dispatch(timings: list[dict]) -> dict | None:
    """What the timed calls spent on the host (the gate's host_dispatch_us, recorded since gate
    timing could queue a backlog): median of the medians per side, the calls whose dispatch outlasted
    the spin before them, of how many, and the spins. None for records without it."""
    with_host = [tm for tm in timings if tm.get("host_dispatch_us")]
    if not with_host:
        return None
    sides = {"kernel": "candidate", "reference": "vendor"}
    out = {"median_us": {k: _median([tm["host_dispatch_us"][s]["median_us"] for tm in with_host]) for k, s in sides.items()},
           "timed_calls": sum(tm["reps"] * tm["trials"] for tm in with_host)}
    spun = [tm for tm in with_host if tm.get("backlog_us")]
    if spun:
        out["backlog_us"] = {k: max(tm["backlog_us"][s] for tm in spun) for k, s in sides.items()}
        out["over_backlog"] = {k: sum(tm["host_dispatch_us"][s].get("over_backlog", 0) for tm in spun)
                               for k, s in sides.items()}
    return out


def combine_shapes(shapes: list[dict]) -> dict:
    """An instance's speedup from its benchmark shapes (shape_speedup results)."""
    s = len(shapes)
    m = math.fsum(x["log_mean"] for x in shapes) / s
    var = math.fsum(x["log_var"] for x in shapes) / s ** 2
    df = min(x["n"] for x in shapes) - 1
    half = t975(df) * math.sqrt(var) if df >= 1 else None
    return {"speedup": math.exp(m), "ci95": [math.exp(m - half), math.exp(m + half)] if half is not None else [None, None],
            "log_mean": m, "log_var": var, "df": df, "n_trials": sum(x["n"] for x in shapes)}


def _median(xs: list[float]) -> float | None:
    if not xs:
        return None
    ys = sorted(xs)
    k = len(ys) // 2
    return ys[k] if len(ys) % 2 else (ys[k - 1] + ys[k]) / 2


def counted_speedup(row: dict, failure_speedup: float) -> float | None:
    """The speedup a row enters geomeans with: its own when PASSED, `failure_speedup` when FAILED,
    None (left out, and said so) when the condition was not run or its records are missing."""
    if row["status"] == "PASSED":
        return row["speedup"]
    if row["status"] == "FAILED":
        return failure_speedup
    return None


def geo(values: list[float]) -> float | None:
    return math.exp(math.fsum(math.log(v) for v in values) / len(values)) if values else None


def aggregate(rows: list[dict], failure_speedup: float) -> dict:
    """Counts and geomeans of one condition over a set of instances' rows."""
    counted = [(r, counted_speedup(r, failure_speedup)) for r in rows]
    used = [v for _, v in counted if v is not None]
    ok = [r["speedup"] for r in rows if r["status"] == "PASSED"]
    return {"instances": len(rows),
            "passed": sum(r["status"] == "PASSED" for r in rows),
            "failed": sum(r["status"] == "FAILED" for r in rows),
            "not_counted": sorted(f"{r['instance']} ({r['status']})" for r, v in counted if v is None),
            "geomean": geo(used),
            "geomean_success_only": geo(ok),
            "at_or_above_reference": sum(1 for r in rows if r["status"] == "PASSED" and r["speedup"] >= 1.0),
            "above_reference_beyond_noise": sum(1 for r in rows if r["status"] == "PASSED"
                                                and (r.get("ci95") or [None])[0] is not None and r["ci95"][0] > 1.0)}


def _log_and_var(row: dict, failure_speedup: float) -> tuple[float, float, int | None]:
    if row["status"] == "PASSED":
        return math.log(row["speedup"]), row["log_var"], row["df"]
    return math.log(failure_speedup), 0.0, None  # a failure is a fixed number, not a measurement


def compare(a_rows: list[dict], b_rows: list[dict], failure_speedup: float) -> dict | None:
    """Condition A against B over the instances both decided (PASSED or FAILED): the geometric
    mean of A's speedup over B's, and a 95% interval from the timing noise of both (t with the
    smallest df among the measured rows). Rows of one instance with the same final kernel and
    measurement (same eval keys) differ by exactly 0. None when no instance is shared."""
    b_by = {r["instance"]: r for r in b_rows}
    pairs = [(a, b_by[a["instance"]]) for a in a_rows
             if a["instance"] in b_by and a["status"] in ("PASSED", "FAILED") and b_by[a["instance"]]["status"]
             in ("PASSED", "FAILED")]
    if not pairs:
        return None
    diffs, var, dfs = [], 0.0, []
    for a, b in pairs:
        if a["status"] == b["status"] == "PASSED" and a["final_eval_keys"] == b["final_eval_keys"]:
            diffs.append(0.0)
            continue
        la, va, da = _log_and_var(a, failure_speedup)
        lb, vb, db = _log_and_var(b, failure_speedup)
        diffs.append(la - lb)
        var += va + vb
        dfs += [d for d in (da, db) if d]
    n = len(pairs)
    d = math.fsum(diffs) / n
    se = math.sqrt(var) / n
    half = t975(min(dfs)) * se if dfs else 0.0
    lo, hi = math.exp(d - half), math.exp(d + half)
    verdict = ("faster beyond the timing noise" if lo > 1.0 else
               "slower beyond the timing noise" if hi < 1.0 else "within the timing noise")
    return {"instances": n, "ratio": math.exp(d), "ci95": [lo, hi], "verdict": verdict}
