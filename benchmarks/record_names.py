"""A GPU record is named by the card its environment shows, not by the card that was asked for: the
device may lend an H100 for an H200, and a record written there says h100.

    card("NVIDIA H100 80GB HBM3") == "h100"      card("NVIDIA H200") == "h200"
    named("rederive_{card}.json", "NVIDIA H200") == "rederive_h200.json"
    find(RESULTS, "rederive_{card}.json")  ->  the one committed record, whichever card made it

The scripts name their output with `named` (the card read from the GPU they ran on: `gpu_name()`),
the tests that replay a record find it with `find` and check that the card in its name is the one in
its environment.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

_MODEL = re.compile(r"\b([A-Z]{1,3}\d{2,4}[A-Z]?)\b")


def card(gpu: str | None) -> str:
    """The card's short name from a device name as torch or nvidia-smi print it: its model number in
    lower case ("NVIDIA H100 80GB HBM3" -> "h100", "NVIDIA A100-SXM4-40GB" -> "a100"), else the name
    without the vendor, as a slug. ValueError without a name: a record must say where it was made."""
    if not gpu or not gpu.strip():
        raise ValueError("no GPU name: a GPU record is named by the card it ran on (run it on the GPU machine)")
    m = _MODEL.search(gpu)
    if m:
        return m.group(1).lower()
    return re.sub(r"[^a-z0-9]+", "-", gpu.lower().replace("nvidia", "")).strip("-")


def named(pattern: str, gpu: str | None) -> str:
    """`pattern` with its `{card}` filled in for the device named `gpu`."""
    return pattern.format(card=card(gpu))


def gpu_name(index: int = 0) -> str | None:
    """The name nvidia-smi gives GPU `index` (the one torch calls cuda:0 when CUDA_VISIBLE_DEVICES is
    unset), or None without a GPU. Asks the driver, so the calling process makes no CUDA context."""
    try:
        r = subprocess.run(["nvidia-smi", "-i", str(index), "--query-gpu=name", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    name = r.stdout.strip().splitlines()[0].strip() if r.returncode == 0 and r.stdout.strip() else ""
    return name or None


def find(folder: Path, pattern: str) -> list[Path]:
    """The files or folders in `folder` that `pattern` names for any card, sorted."""
    rx = re.compile(re.escape(pattern).replace(re.escape("{card}"), "([a-z0-9-]+)") + r"\Z")
    return sorted(p for p in folder.iterdir() if rx.match(p.name)) if folder.is_dir() else []


def card_of(path: Path, pattern: str) -> str:
    """The card a record's name carries (`pattern` as for `find`)."""
    rx = re.compile(re.escape(pattern).replace(re.escape("{card}"), "([a-z0-9-]+)") + r"\Z")
    m = rx.match(path.name)
    if not m:
        raise ValueError(f"{path.name} is not named {pattern}")
    return m.group(1)


def the_record(folder: Path, pattern: str, how: str) -> Path:
    """The one record `pattern` names in `folder`. AssertionError, saying `how` to record it, when
    there is none, and naming them when there are several (a re-record on another card leaves the
    old one behind: remove it)."""
    hits = find(folder, pattern)
    assert hits, f"no {pattern.format(card='<card>')} in {folder}: {how}"
    assert len(hits) == 1, (f"several records {', '.join(p.name for p in hits)} in {folder}: keep the one "
                            "recorded last and remove the others")
    return hits[0]
