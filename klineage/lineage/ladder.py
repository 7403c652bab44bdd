"""Version ladders as authors write them: the rungs of one kernel's history, what each declares, the
order the versions walk takes through them, and the audit of a step between two rungs.

A ladder is naive.cu, the files of versions/ (in natural order: v2 before v10) and expert.cu, or the
committed versions of one file. A rung may declare what it adds over the rung it was written from,
in its first lines (`// klineage-step: mechanism=NAME` or `mechanism=A,B` for a bundled step) or,
leaving the author's file as it is, in versions/ladder.toml:

    description = "..."
    expert_adds = "NAME"                 # or ["A", "B"]: what expert.cu adds
    structural  = ["smem_tiling"]        # names no detector knows, declared structural
    [steps]
    "kernel_4.cu" = ["vector_access", "warp_reduction"]
    [from]
    "kernel_6.cu" = "kernel_3.cu"        # a restart: kernel_6 was written from kernel_3

A declared name must be a known mechanism family (klineage.mechanisms.registry) or listed in
`structural`; anything else is an error before anything is built. An undeclared rung's step is what
the detectors see it add.

What a rung holds: the mechanism kinds the evidence reads in it (what `klineage features` prints:
every form the source detectors see, rewritable or not, and the compiler's evidence), and the
structural names (those no detector sees) declared by it and by the rungs it was written from: the
one `[from]` names, else the file before it.

Order. Authors number rungs as they like (a restart from an earlier version, a later version that
drops a mechanism again), so the walk orders rungs by what they hold: rung a lies below rung b when
a holds a proper subset of what b holds, or the same with a earlier in file order. From each state
the walk tries the rungs below it, the one with the longest chain below it first (so it walks as
many rungs as it can), then the next; a refused candidate is recorded and the next one tried, which
makes the step a compound one over the refused rung. Rungs the walk never reaches are recorded with
the reason.

Audit of a step richer -> simpler (klineage.mechanisms.audit.audit_ladder_step, over the same
evidence): no mechanism kind of the simpler rung is lost; the step is labelled with what the evidence
says it adds (the structural names the richer rung holds and the simpler does not, the declared
names seen added, the kinds seen added without a declaration). The declared names are those of the
richer rung and of the rungs it was written from down to the simpler one that it still holds (a
later rung may drop a mechanism again). A declared name the evidence does not see added is shown
beside the evidence and does not stop the walk; a step the evidence sees add nothing, with nothing
structural declared, is refused.
"""
from __future__ import annotations

import difflib
import re
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from klineage.errors import KLineageError
from klineage.mechanisms.base import Feature
from klineage.settings import display_path

_STEP = re.compile(r"//\s*klineage-step:\s*mechanism=([A-Za-z_]\w*(?:[ \t]*[,+][ \t]*[A-Za-z_]\w*)*)")
LADDER_KEYS = ("description", "expert_adds", "structural", "steps", "from")
HEADER_LINES = 5  # a declaration is read from a rung's first lines only


class ProposerError(KLineageError):
    """A proposer cannot run on this input (missing ladder, unknown proposer or mechanism, bad header)."""
    exit_code = 2


@dataclass
class Version:
    label: str
    source: str
    mechanism: str | None  # what this rung declares it adds ("a+b" for several); None: nothing declared
    origin: str
    mechanisms: tuple[str, ...] = ()  # the declared names one by one
    parent: str | None = None         # the label of the rung it was written from, where [from] names one


def _version(label: str, source: str, names: tuple[str, ...], origin: str, parent: str | None = None) -> Version:
    return Version(label, source, "+".join(names) if names else None, origin, names, parent)


def declared_mechanisms(source: str) -> tuple[str, ...]:
    """The names a rung declares in its first lines (`// klineage-step: mechanism=A[,B...]`), in order."""
    m = _STEP.search("\n".join(source.splitlines()[:HEADER_LINES]))
    return tuple(dict.fromkeys(n.strip() for n in re.split(r"[,+]", m.group(1)))) if m else ()


def declared_mechanism(source: str) -> str | None:
    names = declared_mechanisms(source)
    return "+".join(names) if names else None


def natural_key(name: str) -> list:
    """Sort key that reads digit runs as numbers: kernel_2 before kernel_10."""
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", name)]


@dataclass
class LadderMeta:
    """versions/ladder.toml, checked."""
    path: Path | None = None
    description: str = ""
    expert_adds: tuple[str, ...] = ()
    structural: frozenset[str] = frozenset()
    steps: dict[str, tuple[str, ...]] = field(default_factory=dict)  # file name -> declared names
    parents: dict[str, str] = field(default_factory=dict)  # file name -> the file it was written from


def _names(value, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.isidentifier() for v in value):
        raise ProposerError(f"{where} = {value!r}: expected a mechanism name or a list of them")
    return tuple(dict.fromkeys(value))


def read_meta(vdir: Path) -> LadderMeta:
    """The ladder's ladder.toml (an empty LadderMeta without one); ProposerError naming the fix."""
    meta = vdir / "ladder.toml"
    if not meta.is_file():
        return LadderMeta()
    try:
        raw = tomllib.loads(meta.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ProposerError(f"{meta} is not valid TOML ({e}): fix it") from e
    unknown = sorted(set(raw) - set(LADDER_KEYS))
    if unknown:
        raise ProposerError(f"{meta}: unknown key {unknown[0]!r} (allowed: {', '.join(LADDER_KEYS)})")
    steps = raw.get("steps", {})
    if not isinstance(steps, dict):
        raise ProposerError(f"{meta}: steps must be a table ([steps] with \"FILE.cu\" = [NAMES])")
    structural = raw.get("structural", [])
    if not isinstance(structural, list) or not all(isinstance(s, str) and s.isidentifier() for s in structural):
        raise ProposerError(f"{meta}: structural = {structural!r}: expected a list of mechanism names")
    parents = raw.get("from", {})
    if not isinstance(parents, dict) or not all(isinstance(v, str) for v in parents.values()):
        raise ProposerError(f"{meta}: from must be a table ([from] with \"FILE.cu\" = \"EARLIER.cu\")")
    return LadderMeta(meta, str(raw.get("description", "")),
                      _names(raw["expert_adds"], f"{meta}: expert_adds") if "expert_adds" in raw else (),
                      frozenset(structural),
                      {str(k): _names(v, f"{meta}: steps.{k}") for k, v in steps.items()},
                      {str(k): v for k, v in parents.items()})


def check_names(ladder: list[Version], meta: LadderMeta, known: set[str]) -> None:
    """ProposerError for the first declared name that is neither a known family nor declared
    structural in ladder.toml, naming the closest known name and the two fixes."""
    allowed = set(known) | set(meta.structural)
    where_meta = display_path(meta.path) if meta.path else "versions/ladder.toml"
    for v in ladder:
        for n in v.mechanisms:
            if n in allowed:
                continue
            close = difflib.get_close_matches(n, sorted(allowed), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ProposerError(f"{v.origin} declares mechanism {n!r}, which is neither a known family nor declared "
                                f"structural: {hint}fix the name, or add it to structural = [...] in {where_meta}")


def ladder_from_folder(workload_dir: Path, known: set[str] | None = None) -> list[Version]:
    """naive.cu, versions/*.cu (natural order), expert.cu, each with its declared names; ProposerError
    when the folder has no ladder, a rung is missing, or a declared name is unknown."""
    vdir = workload_dir / "versions"
    files = sorted(vdir.glob("*.cu"), key=lambda p: natural_key(p.name)) if vdir.is_dir() else []
    if not files:
        raise ProposerError(f"{workload_dir} has no versions/*.cu ladder: add one, or use --proposer rules")
    meta = read_meta(vdir)
    stem = {p.name: p.stem for p in files} | {p.stem: p.stem for p in files} | {"expert.cu": "expert", "expert": "expert",
                                                                                "naive.cu": "naive", "naive": "naive"}
    for table, keys in (("steps", meta.steps), ("from", [*meta.parents, *meta.parents.values()])):
        stray = sorted(set(keys) - set(stem))
        if stray:
            raise ProposerError(f"{meta.path}: {table} names {stray[0]!r}, which is not a rung of the ladder "
                                f"(naive.cu, {', '.join(p.name for p in files)}, expert.cu)")
    chain = [workload_dir / "naive.cu", *files, workload_dir / "expert.cu"]
    out = []
    for i, p in enumerate(chain):
        if not p.is_file():
            raise ProposerError(f"ladder of {workload_dir} needs {p.name}: add it")
        text = p.read_text()
        header = declared_mechanisms(text) if i > 0 else ()
        listed = meta.steps.get(p.name) or meta.steps.get(p.stem) or ()
        if i == len(chain) - 1:
            listed = listed or meta.expert_adds
        if header and listed and header != listed:
            raise ProposerError(f"{display_path(p)} declares {'+'.join(header)} in its header and "
                                f"{'+'.join(listed)} in {meta.path}: keep one of the two")
        parent = meta.parents.get(p.name) or meta.parents.get(p.stem)
        out.append(_version(p.stem, text, header or listed, display_path(p), stem[parent] if parent else None))
    check_names(out, meta, _known() if known is None else known)
    _check_parents(out, meta)
    return out


def _check_parents(ladder: list[Version], meta: LadderMeta) -> None:
    """ProposerError when [from] makes a rung its own ancestor."""
    index = {v.label: i for i, v in enumerate(ladder)}
    for i in range(len(ladder)):
        seen, j = set(), i
        while j is not None and j not in seen:
            seen.add(j)
            j = parent_index(ladder, j, index)
        if j is not None:
            raise ProposerError(f"{meta.path}: [from] makes {ladder[i].label} its own ancestor: "
                                "name the rung each file was written from")


def parent_index(ladder: list[Version], i: int, index: dict[str, int] | None = None) -> int | None:
    """The rung rung i was written from: its [from] entry, else the rung before it in file order."""
    if ladder[i].parent is not None:
        return (index or {v.label: k for k, v in enumerate(ladder)})[ladder[i].parent]
    return i - 1 if i > 0 else None


def structural_held(ladder: list[Version], detectable: set[str]) -> list[frozenset[str]]:
    """Per rung, the structural names it holds: its own and those of the rungs it was written from."""
    index = {v.label: k for k, v in enumerate(ladder)}
    memo: dict[int, frozenset[str]] = {}

    def held(i: int) -> frozenset[str]:
        if i not in memo:
            p = parent_index(ladder, i, index)
            memo[i] = (held(p) if p is not None else frozenset()) | {n for n in ladder[i].mechanisms
                                                                     if n not in detectable}
        return memo[i]
    return [held(i) for i in range(len(ladder))]


def ladder_from_git(path: Path, known: set[str] | None = None) -> list[Version]:
    """The committed versions of one file, oldest first (each commit after the first may declare its
    mechanism in the file header or in the commit subject as `mechanism=NAME`)."""
    try:
        log = subprocess.run(["git", "log", "--follow", "--reverse", "--format=%H %s", "--", path.name],
                             cwd=path.parent, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise ProposerError(f"cannot read the git history of {path}: {e}; pass a versions/ folder instead") from e
    rel = subprocess.run(["git", "ls-files", "--full-name", path.name], cwd=path.parent,
                         capture_output=True, text=True).stdout.strip() or path.name
    out = []
    for line in log.splitlines():
        sha, _, subject = line.partition(" ")
        text = subprocess.run(["git", "show", f"{sha}:{rel}"], cwd=path.parent, capture_output=True,
                              text=True).stdout
        m = re.search(r"mechanism=(\w+(?:[,+]\w+)*)", subject)
        names = declared_mechanisms(text) or (tuple(re.split(r"[,+]", m.group(1))) if m else ())
        out.append(_version(sha[:12], text, names if out else (), f"{path}@{sha[:12]}"))
    if len(out) < 2:
        raise ProposerError(f"{path} has fewer than two committed versions: nothing to walk")
    check_names(out, read_meta(path.parent), _known() if known is None else known)
    return out


def _known() -> set[str]:
    from klineage.mechanisms import registry
    return set(registry())


# ---------------------------------------------------------------------------- order of the rungs
class RungOrder:
    """The rungs ordered by what each holds (see the module text): `features` per rung, and the
    structural names each holds (structural_held)."""

    def __init__(self, features: list[list[Feature]], structural: list[frozenset[str]] | None = None):
        from klineage.mechanisms.audit import replaced_by
        self.kinds = [frozenset(f.mechanism for f in fs) | (structural[i] if structural else frozenset())
                      for i, fs in enumerate(features)]
        # what a rung holds, with what its mechanisms take over (asynchronous copies replace the register
        # staging of a rung written before them): a rung holding that instead still lies below it
        self.covers = [k | replaced_by(k) for k in self.kinds]
        n = len(self.kinds)
        self.height = [0] * n
        for _ in range(n):  # longest chain below each rung (`below` is acyclic)
            for j in range(n):
                self.height[j] = max((self.height[i] + 1 for i in range(n) if self.below(i, j)), default=0)

    def below(self, a: int, b: int) -> bool:
        """Rung a lies below rung b: b holds (or takes over) everything a holds and more, or the same with
        a earlier in file order."""
        ka, kb = self.kinds[a], self.kinds[b]
        return a != b and ka <= self.covers[b] and (not kb <= self.covers[a] or a < b)

    def candidates(self, top: int) -> list[int]:
        """The rungs below `top`, the one with the longest chain below it first, then the later file."""
        return sorted((i for i in range(len(self.kinds)) if self.below(i, top)),
                      key=lambda i: (-self.height[i], -i))
