"""Run configurations as typed tables: one strict layer for every TOML file a run reads.

Each table of a mining configuration or a pipeline (klineage.pipelines) is a pydantic model that
forbids unknown keys and coerces nothing (a bool is not an int, a string is not a number). Each
field's description is what a message says is expected of it. ``validate(model, data, path, error)``
returns the model or raises `error` with one line that names the file and the key:

  unknown key 'bogus' (allowed: ...)        at the top level (the allowed keys in declaration order)
  unknown key gate.warm (allowed: ...)      in a table
  gate.trials = 1: expected an int from 2 to 10
  apply.materializers: 'magic' is not one of rules, sweep, llm
  apply.start is required
  [gate] must be a table of warmup, reps, trials, backlog_us

A validated file's values are read from the file itself (in its order, as it wrote them: the
model has checked them), so a run's defaults stay where they are defined (GateConfig, Limits,
AnalysisConfig, ApplyConfig, HeldoutConfig).
"""
from __future__ import annotations

import typing
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from klineage.gate.compile import ARCHS
from klineage.lineage.analyze import AnalysisConfig

Num = Union[int, float]


def ranged(lo: int, hi: int):
    return Field(None, ge=lo, le=hi, description=f"an int from {lo} to {hi}")


def expect(text: str, default: Any = None):
    return Field(default, description=text)


class Table(BaseModel):
    """A TOML table: unknown keys are errors, nothing is coerced. MISSING: per required key, the
    message when it is absent (default: "KEY is required")."""
    model_config = ConfigDict(extra="forbid", strict=True)
    MISSING: typing.ClassVar[dict[str, str]] = {}


# backlog_us: a GPU spin queued before every timed call, at least this long and at least twice the
# call's host-side dispatch (klineage.gate.worker.timing); 0, the default, queues none.
class GateTable(Table):
    """[gate] of a held-out pipeline: timing settings only (its instances are sm_90a builds)."""
    warmup: Optional[int] = ranged(0, 100)
    reps: Optional[int] = ranged(5, 500)
    trials: Optional[int] = ranged(2, 10)
    backlog_us: Optional[int] = ranged(0, 20000)


class ArchGateTable(GateTable):
    """[gate] of a mining or apply configuration: timing settings and the build target."""
    arch: Optional[Literal[ARCHS]] = expect("one of " + ", ".join(ARCHS))


class LimitsTable(Table):
    max_rejections: Optional[Num] = expect("a number")
    max_steps: Optional[Num] = expect("a number")
    min_rederive_ratio: Optional[Num] = expect("a number")


class WalkTable(Table):
    rules_loci: Optional[Literal["identity", "occurrence"]] = expect(
        '"identity" (identical loci matched by their place; the default) or "occurrence" (by their number)')


class AnalysisTable(Table):
    rounds: Optional[int] = ranged(1, 5)
    probes: Optional[bool] = expect("true or false")
    static: Optional[bool] = expect("true or false")
    scope: Optional[bool] = expect("true or false")
    admission: Optional[bool] = expect("true or false")
    admission_rewrites: Optional[Literal[AnalysisConfig.ADMISSION_REWRITES]] = expect(
        "one of " + ", ".join(f'"{x}"' for x in AnalysisConfig.ADMISSION_REWRITES))


class TargetTable(Table):
    MISSING = {"paths": "needs paths = [...]"}
    paths: list[str] = expect("a list of folder names", ...)
    proposer: Literal["rules", "versions", "llm"] = expect("rules, versions or llm", "rules")


class MineFile(Table):
    """A mining configuration (pipelines/mine.toml): [[target]] tables and optional [limits],
    [gate], [analysis], [walk]."""
    analysis: Optional[AnalysisTable] = expect("a table")
    description: Optional[str] = expect("a string")
    gate: Optional[ArchGateTable] = expect("a table")
    kind: Literal["mine"] = expect('"mine" (a mining configuration)', "mine")
    limits: Optional[LimitsTable] = expect("a table")
    name: Optional[str] = expect("a string")
    target: list[TargetTable] = expect("an array of tables ([[target]] with paths and proposer)", [])
    walk: Optional[WalkTable] = expect("a table")


class ApplyTable(Table):
    admission: Optional[Union[bool, Literal["first"]]] = expect('true (admitted skills only), false (admission ignored) '
                                                                'or "first" (admitted skills first; the default)')
    base_url: Optional[str] = expect("str")
    budget_s: Optional[Num] = expect("a number")
    budget_steps: Optional[int] = expect("int")
    budget_usd: Optional[Num] = expect("a number")
    materializers: Optional[list[Literal["rules", "sweep", "llm"]]] = expect("rules, sweep, llm")
    model: Optional[str] = expect("str")
    out: Optional[str] = expect("str")
    records: Optional[str] = expect("str")
    start: str = expect("str", ...)
    structural: Optional[str] = expect("str")
    sweep_axes: Optional[str] = expect("str")
    workload: str = expect("str", ...)


class ApplyFile(Table):
    MISSING = {"apply": "an apply pipeline needs an [apply] table with workload and start"}
    apply: ApplyTable = expect("a table", ...)
    description: Optional[str] = expect("a string")
    gate: Optional[ArchGateTable] = expect("a table")
    kind: Literal["apply"] = expect('"apply"', "apply")
    name: Optional[str] = expect("a string")


class HeldoutTable(Table):
    admission: Optional[bool] = expect("bool")
    budget: Optional[int] = expect("int")
    budget_usd: Optional[Num] = expect("a number")
    conditions: Optional[list[str]] = expect("a list of conditions")
    failure_speedup: Optional[float] = expect("float")
    final_rounds: Optional[int] = expect("int")
    foreign: Optional[dict[str, list[str]]] = expect("family = [unrelated family names]")
    idiom_arm: Optional[bool] = expect("bool")
    model: Optional[str] = expect("str")
    out: Optional[str] = expect("str")
    records: Optional[str] = expect("str")
    root: Optional[str] = expect("str")
    seed: Optional[int] = expect("int")
    structural: Optional[bool] = expect("bool")
    sweep_axes: Optional[str] = expect("str")
    sweep_rounds: Optional[int] = expect("int")
    vendor: Optional[str] = expect("str")


class HeldoutFile(Table):
    description: Optional[str] = expect("a string")
    gate: Optional[GateTable] = expect("a table")
    heldout: Optional[HeldoutTable] = expect("a table")
    kind: Literal["heldout"] = expect('"heldout"', "heldout")
    name: Optional[str] = expect("a string")


def validate(model: type[Table], data: Any, path, error: type[Exception]) -> Table:
    """`data` as `model`, or `error` with one line naming the file, the key and what it expects."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        # an unknown key first (the outermost), as a reader fixes a misspelt key before its value
        errs = sorted(exc.errors(), key=lambda e: (0, len(e["loc"])) if e["type"] == "extra_forbidden" else (1, 0))
        raise error(f"{path}: {_message(model, errs[0])}") from None


def _walk(model: type[Table], loc: tuple) -> tuple[type[Table] | None, list[str], str | None, Any]:
    """(the innermost table of `loc`, the dotted name's parts, the innermost field's name and its
    FieldInfo). A key below a field that is no table (a dict's key, a list's index) keeps that field."""
    parts: list[str] = []
    table, name, info, tagged = model, None, None, False
    for step in loc:
        if isinstance(step, int):
            if parts:
                parts[-1] += f"[{step}]"
            continue
        if tagged:  # the member of a union the value was tried as ("int", "float"): no key
            tagged = False
            continue
        parts.append(str(step))
        if table is not None and step in table.model_fields:
            name, info = step, table.model_fields[step]
            table = _table_type(info.annotation)
            tagged = typing.get_origin(_optional_of(info.annotation)) is Union
        else:
            table = None
    return table, parts, name, info


def _optional_of(annotation):
    """X of Optional[X] (X itself otherwise)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if typing.get_origin(annotation) is Union and len(args) == 1 else annotation


def _table_type(annotation) -> type[Table] | None:
    for arg in (annotation, *typing.get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, Table):
            return arg
        for sub in typing.get_args(arg):
            if isinstance(sub, type) and issubclass(sub, Table):
                return sub
    return None


def _message(model: type[Table], err: dict) -> str:
    loc, kind, value = tuple(err["loc"]), err["type"], err.get("input")
    owner = _walk(model, loc[:-1])[0] if loc[:-1] else model
    table, parts, name, info = _walk(model, loc)
    dotted = ".".join(parts)
    if kind == "extra_forbidden":
        key = repr(loc[-1]) if len(parts) == 1 else dotted
        return f"unknown key {key} (allowed: {', '.join((owner or model).model_fields)})"
    if kind == "missing":
        text = (owner or model).MISSING.get(name)
        if text and text.startswith("needs"):
            return f"{'.'.join(parts[:-1])} {text}"
        return text or f"{dotted} is required"
    inner = _table_type(info.annotation) if info is not None else None
    if kind == "list_type" and inner is not None:
        return f"{dotted} must be {info.description}"
    if kind in ("model_type", "model_attributes_type") and inner is not None:
        return f"[{dotted}] must be a table of {', '.join(inner.model_fields)}"
    if kind == "literal_error" and isinstance(loc[-1], int):
        return f"{dotted.rsplit('[', 1)[0]}: {value!r} is not one of {info.description}"
    return f"{dotted} = {value!r}: expected {info.description if info is not None else 'another value'}"
