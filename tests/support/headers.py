"""The `// key: value` header of a gallery or fault kernel (tests/gallery, tests/faults), read by the
tests, benchmarks/gate_h200.py and benchmarks/soak_h200.py alike.

    // pitfall: 2                     (gallery) the row of shared/reference/harness-pitfalls.md
    // fault: host_crash              (faults) what breaks
    // expect: GUARD_REJECTED         the gate as shipped
    // dynamic: INCORRECT wrong_values | RUNTIME_ERROR cuda_error
                                      the guard off: the dynamic defences alone
    // why: ...

An outcome is `STATUS [error_kind]`; `expect` and `dynamic` may name alternatives separated by `|`
when a race decides between them (a kernel that launches late may be read before it writes, or
write into freed buffers): any one of them meets the header.
"""
from __future__ import annotations

import re
from pathlib import Path

HEADER = re.compile(r"^//\s*(pitfall|fault|expect|dynamic|why):\s*(.+)$", re.M)


def header(kernel: Path | str) -> dict[str, str]:
    """The header fields of a kernel file (a Path) or of its text (a str)."""
    text = kernel.read_text() if isinstance(kernel, Path) else kernel
    return {k: v.strip() for k, v in HEADER.findall(text)}


def outcomes(value: str | None) -> list[tuple[str, str | None]]:
    """The alternatives an `expect` or `dynamic` value names, as (status, error kind or None);
    [] for a missing or empty value."""
    out = []
    for alt in (value or "").split("|"):
        status, _, kind = alt.strip().partition(" ")
        if status:
            out.append((status, kind.strip() or None))
    return out


def statuses(value: str | None) -> list[str]:
    """The statuses of the alternatives, in header order."""
    return [s for s, _ in outcomes(value)]


def outcome_met(got: dict, want: str | None) -> bool:
    """Whether a recorded outcome ({"status", "error_kind"}) is one of the alternatives of `want`
    (False when `want` names none)."""
    return any(got.get("status") == status and (kind is None or got.get("error_kind") == kind)
               for status, kind in outcomes(want))
