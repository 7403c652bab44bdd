"""The evaluation: what the gate is asked (request) and what it answers (result), as stored.

The result's status decides which metrics it may carry, as the gate produces them: timing only
when PASSED (a kernel that failed is never timed) and then always, unless the request asked for
correctness only (empty timing settings); no correctness or activity after a COMPILE_ERROR (the
kernel never ran); a guard that rejects a kernel after running it keeps what the run measured; an
error kind for every status but PASSED, and none for PASSED.
"""
from __future__ import annotations

import enum
from typing import Any, Optional

from pydantic import model_validator

from klineage.records.base import Closed, Number, Open


class Status(str, enum.Enum):
    COMPILE_ERROR = "COMPILE_ERROR"
    GUARD_REJECTED = "GUARD_REJECTED"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    TIMEOUT = "TIMEOUT"
    INCORRECT = "INCORRECT"
    PASSED = "PASSED"


# the metrics each status may carry (non-empty): what a result of that status can have measured
METRICS: dict[Status, frozenset[str]] = {
    Status.GUARD_REJECTED: frozenset({"compile", "correctness", "activity"}),
    Status.COMPILE_ERROR: frozenset({"compile"}),
    Status.RUNTIME_ERROR: frozenset({"compile", "correctness", "activity"}),
    Status.TIMEOUT: frozenset({"compile", "correctness", "activity"}),
    Status.INCORRECT: frozenset({"compile", "correctness", "activity"}),
    Status.PASSED: frozenset({"compile", "correctness", "activity", "timing"}),
}


class EvaluationRequest(Open):
    """What was asked: the kernel, the workload, and every setting that changes the answer (its
    hash is the eval key)."""
    kernel_hash: str
    workload_hash: str
    arch: str
    flags: list[str]
    seeds: list[int]
    shapes: Any
    timing: dict[str, Any]
    guard: Any
    gate_version: Any
    nvcc: Optional[str]


class EvaluationResult(Open):
    """The gate's answer; ``status`` (on the record) decides which metrics it may hold."""
    guard: dict[str, Any]
    compile: Optional[dict[str, Any]] = None
    correctness: list[Any] = []
    activity: Optional[dict[str, Any]] = None
    timing: list[Any] = []
    error_kind: Optional[str] = None
    error_message: Optional[str] = None
    wall_s: Optional[Number] = None

    def check(self, status: Status, timed: bool = True) -> None:
        """Raise ValueError when this result holds a metric `status` does not allow, or lacks one
        it must hold (`timed`: the request asked for timing)."""
        held = {m for m in ("compile", "correctness", "activity", "timing") if getattr(self, m)}
        extra = sorted(held - METRICS[status])
        if extra:
            raise ValueError(f"a {status.value} result cannot carry {', '.join(extra)}")
        if status is Status.PASSED and timed and not self.timing:
            raise ValueError("a PASSED result of a timed request carries its timing")
        if status is Status.PASSED and not timed and self.timing:
            raise ValueError("a PASSED result of a correctness-only request (no timing settings) has no timing")
        if status is Status.PASSED and not self.correctness:
            raise ValueError("a PASSED result carries its correctness results")
        if (status is Status.PASSED) == bool(self.error_kind):
            raise ValueError(f"a {status.value} result {'has no' if status is Status.PASSED else 'names its'} "
                             "error_kind")


class EvaluationRecord(Closed):
    """One stored evaluation (a row of the evaluations table, a line of a record file)."""
    eval_key: str
    kernel_hash: str
    workload_hash: str
    workload_name: str
    request: EvaluationRequest
    status: Status
    result: EvaluationResult
    env: dict[str, Any]
    gpu: Optional[str]
    toolchain: Optional[dict[str, Any]]
    recorded_at: Optional[str] = None

    @model_validator(mode="after")
    def _metrics_of_status(self) -> "EvaluationRecord":
        self.result.check(self.status, timed=bool(self.request.timing))
        return self
