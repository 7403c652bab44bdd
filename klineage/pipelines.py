"""Declarative run configurations (TOML) that `klineage run PIPELINE.toml` executes.

A pipeline file names its kind at the top (`kind = "mine"` or `kind = "apply"`; a file with
`[[target]]` tables and no kind is a mining pipeline). Every table is validated strictly by one typed
layer (klineage.config): an unknown key is an error that names the key and the keys allowed. The run is recorded with its configuration
(the file's text and its hash) in the `pipeline_runs` table, so what produced a library or a
trajectory can always be read back.

  mine   name, description, [limits], [gate], [analysis], [[target]] paths + proposer
         (klineage.lineage.mine.load_config)
  apply  name, description, [gate], [apply]:
           workload (folder), start (kernel file), materializers (list of rules/sweep/llm),
           budget_steps, budget_usd, budget_s, admission (true / false / "first", the default), sweep_axes,
           structural (library/off: the retrieved structural skills first, or none), model, base_url,
           out (folder)
  heldout  name, description, [gate], [heldout]:
           root (folder of instances), conditions (list), budget, seed, final_rounds, sweep_rounds,
           sweep_axes (source/buildable), admission (bool), structural (bool: structural rewrites
           first, the controls the same rewriters without the library; klineage.heldout.run),
           idiom_arm (bool: with structural, a reduction's idiom kernel is an arm beside its naive start),
           vendor (auto/primary/fallback), failure_speedup, records (folder of recorded evaluations
           a --replay imports), out (folder), model, budget_usd, and [heldout.foreign]: family ->
           list of unrelated families (klineage.heldout.run.DEFAULT_FOREIGN when absent)
  Paths are relative to the repository root (the folder above pipelines/).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from klineage.config import ApplyFile, HeldoutFile, validate
from klineage.errors import KLineageError, read_toml
from klineage.gate.compile import DEFAULT_ARCH

KINDS = ("mine", "apply", "heldout")


class PipelineError(KLineageError):
    """A bad pipeline file; the message names the file, the key and the fix."""
    exit_code = 2


@dataclass
class Pipeline:
    path: Path
    kind: str
    name: str
    text: str
    raw: dict
    run: object  # MineRun for mine, ApplyPipeline for apply, HeldoutPipeline for heldout

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def _structural_mode(value: str | None) -> dict | None:
    """ApplyConfig.structural from an apply pipeline's `structural` (library, the default, or off)."""
    if value in (None, "library"):
        return {"mode": "library"}
    if value == "off":
        return None
    raise ValueError(f"structural = {value!r}: choose library or off")


@dataclass
class ApplyPipeline:
    workload: Path
    start: Path
    config: object  # klineage.apply.loop.ApplyConfig
    gate: dict
    base_url: str | None
    out: Path | None
    records: list = None  # record files or folders a --replay imports first (apply.records)


def _read(path: Path) -> tuple[str, dict]:
    return read_toml(path, PipelineError, "one of pipelines/*.toml")


def load_pipeline(path: str | Path) -> Pipeline:
    path = Path(path)
    text, raw = _read(path)
    kind = raw.get("kind", "mine" if "target" in raw else None)
    if kind not in KINDS:
        raise PipelineError(f"{path}: kind = {raw.get('kind')!r}: expected one of {', '.join(KINDS)}")
    name = raw.get("name") or path.stem
    if kind == "mine":
        from klineage.lineage.mine import load_config
        return Pipeline(path, kind, name, text, raw, load_config(path)[0])
    if kind == "heldout":
        return Pipeline(path, kind, name, text, raw, heldout_pipeline(path, raw))
    return Pipeline(path, kind, name, text, raw, _apply_pipeline(path, raw))


@dataclass
class HeldoutPipeline:
    root: Path
    config: object  # klineage.heldout.run.HeldoutConfig
    records: list[Path]
    out: Path | None


def heldout_pipeline(path: Path, raw: dict) -> HeldoutPipeline:
    """A held-out pipeline's settings (strict: an unknown key or a wrong type names the key)."""
    from klineage.heldout.run import CONDITIONS, HeldoutConfig
    path = Path(path)
    # the held-out pipeline's instances and records are sm_90a builds: its [gate] takes no arch
    validate(HeldoutFile, raw, path, PipelineError)
    ho = raw.get("heldout", {})
    for c in ho.get("conditions", []):
        if c not in CONDITIONS:
            raise PipelineError(f"{path}: heldout.conditions: {c!r} is not one of {', '.join(CONDITIONS)}")
    gate = raw.get("gate", {})
    kw = {k: ho[k] for k in ("budget", "seed", "final_rounds", "sweep_rounds", "sweep_axes", "admission", "structural",
                             "idiom_arm", "vendor", "failure_speedup", "model", "budget_usd") if k in ho}
    if "conditions" in ho:
        kw["conditions"] = tuple(ho["conditions"])
    if "foreign" in ho:
        kw["foreign"] = {k: tuple(v) for k, v in ho["foreign"].items()}
    try:
        cfg = HeldoutConfig(timing=dict(gate), **kw)
    except ValueError as e:
        raise PipelineError(f"{path}: [heldout]: {e}") from None
    base = path.resolve().parent.parent
    return HeldoutPipeline(base / ho.get("root", "heldout"), cfg,
                           [base / ho["records"]] if "records" in ho else [],
                           base / ho["out"] if "out" in ho else None)


def _apply_pipeline(path: Path, raw: dict) -> ApplyPipeline:
    from klineage.apply.loop import ApplyConfig
    validate(ApplyFile, raw, path, PipelineError)
    ap = raw["apply"]
    mats = tuple(ap.get("materializers", ["rules", "sweep"]))
    gate = raw.get("gate", {})
    base = path.resolve().parent.parent
    wl, start = base / ap["workload"], base / ap["start"]
    if not (wl / "workload.py").is_file():
        raise PipelineError(f"{path}: apply.workload = {ap['workload']!r}: no workload.py there")
    if not start.is_file():
        raise PipelineError(f"{path}: apply.start = {ap['start']!r}: no such kernel file")
    try:
        cfg = ApplyConfig(materializers=mats, budget_steps=ap.get("budget_steps", 16), budget_usd=ap.get("budget_usd"),
                          budget_s=ap.get("budget_s"), admission=ap.get("admission", "first"), model=ap.get("model"),
                          sweep_axes=ap.get("sweep_axes", "source"), structural=_structural_mode(ap.get("structural")),
                          arch=gate.get("arch") or DEFAULT_ARCH)
    except ValueError as e:
        raise PipelineError(f"{path}: [apply]: {e}") from None
    return ApplyPipeline(wl, start, cfg, dict(gate), ap.get("base_url"), base / ap["out"] if "out" in ap else None,
                         [base / ap["records"]] if "records" in ap else [])


# -- a run's bookkeeping: its id, its record in pipeline_runs, its outcome ------------------------------

def start_record(pl: Pipeline, path: Path, replay: bool) -> dict:
    """The pipeline_runs row of a run starting now: a fresh run id (hash of the configuration, the
    replay flag and the clock), the configuration's text and hash."""
    import hashlib
    import time
    from datetime import datetime, timezone
    rid = hashlib.sha256(f"{pl.digest}|{replay}|{time.time_ns()}".encode()).hexdigest()[:16]
    return {"run_id": rid, "name": pl.name, "kind": pl.kind, "path": str(path), "config_hash": pl.digest,
            "config_text": pl.text, "replay": replay, "started_at": datetime.now(timezone.utc).replace(tzinfo=None)}


def outcome(kind: str, result: dict) -> str:
    """ok, missing (a replay lacked records) or failed (an apply whose start kernel failed the gate)."""
    if kind in ("mine", "heldout"):
        return "missing" if result["missing"] else "ok"
    return "failed" if result["stop_reason"] == "start_failed" else "ok"


def summary(kind: str, result: dict | None) -> dict | None:
    """What the pipeline_runs row keeps of a run's result."""
    if result is None:
        return None
    if kind == "mine":
        return {k: v for k, v in result.items() if k not in ("lineages",)}
    if kind == "heldout":
        return {"heldout_run": result["run_id"], "verdict": result["summary"]["verdict"]}
    return {"apply_run": result["run_id"], "stop_reason": result["stop_reason"]}


def import_apply_records(store, ap: ApplyPipeline, path: Path) -> None:
    """A replayed apply pipeline's recorded evaluations (apply.records) into `store`; a missing file is
    a ReplayMissingError that says how to record it."""
    from klineage.errors import ReplayMissingError
    from klineage.settings import display_path
    from klineage.store.recorded import import_paths
    absent = [display_path(r) for r in ap.records if not Path(r).exists()]
    if absent:
        raise ReplayMissingError(
            f"{path}: apply.records {', '.join(absent)} is not there: record it by running this "
            "pipeline on a GPU machine without --replay and exporting the workload's evaluations "
            "(`klineage evals export`; benchmarks/apply_gelu_h200.sh does both for apply_gelu)")
    import_paths(store, ap.records)
