"""Proposers of backward steps, behind one interface and one registry.

A proposer looks at the current (richer) kernel and yields candidate simpler kernels, each with
the mechanism it claims to remove, the locus, and how to re-derive the richer kernel from the
simpler one (forward). The walk gates and audits every candidate the same way, whoever made it.

- `rules` (default): the deoptimize rewrites of klineage.mechanisms, in mechanisms.ORDER, loci in
  source order; forward re-derivation is the family's reoptimize on the simpler kernel.
- `versions`: an ordered ladder of versions of one kernel (a folder `versions/` of .cu files whose
  sorted order is the ladder, with the workload's naive.cu below and expert.cu on top, or the git
  history of one file). The candidate from version i is version i-1; forward re-derivation is
  version i itself. Each version declares the mechanism it adds in its first line:
  `// klineage-step: mechanism=NAME`.
- `llm`: a model proposes each step (klineage.lineage.llm_proposer), behind the same gate and audit.
"""
from __future__ import annotations

import hashlib
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from klineage.errors import KLineageError
from klineage.settings import display_path
from klineage.mechanisms import ORDER, Kernel, registry
from klineage.mechanisms.base import Applied, Feature

_STEP = re.compile(r"//\s*klineage-step:\s*mechanism=([A-Za-z_][\w]*)")


class ProposerError(KLineageError):
    """A proposer cannot run on this input (missing ladder, unknown proposer, bad header)."""


@dataclass
class Proposal:
    proposer: str
    mechanism: str
    locus: str
    source: str              # the simpler kernel
    before: str = ""         # code at the anchor in the richer kernel
    after: str = ""          # code at the anchor in the simpler kernel
    config: dict = field(default_factory=dict)
    anchor: str = ""
    declared: bool = False   # the mechanism is declared (versions), not computed by a detector
    origin: str | None = None  # path of the simpler kernel, when it is a file


def source_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class RulesProposer:
    name = "rules"

    def __init__(self):
        self.mechanisms = registry()

    def propose(self, source: str, features: list[Feature], tried: set) -> Iterator[Proposal | tuple]:
        """Yields Proposal, or (feature, reason) for a removal whose rewrite did not apply."""
        k = Kernel(source)
        for mech_name in ORDER:
            mech = self.mechanisms.get(mech_name)
            if mech is None:
                continue
            for f in features:
                if f.mechanism != mech_name or not f.removable or f.key in tried:
                    continue
                try:
                    res = mech.deoptimize(k, f)
                except Exception as e:  # a rewrite bug is a recorded rejection, never a dead walk
                    yield f, f"deoptimize raised {type(e).__name__}: {e}"
                    continue
                if not isinstance(res, Applied):
                    yield f, res.reason
                    continue
                yield Proposal(self.name, f.mechanism, f.locus, res.source, res.before, res.after, res.config,
                               anchor=f.anchor)

    def rederive(self, proposal: Proposal) -> str | None:
        mech = self.mechanisms[proposal.mechanism]
        try:
            res = mech.reoptimize(Kernel(proposal.source), proposal.locus, proposal.config)
        except Exception:
            return None
        return res.source if isinstance(res, Applied) else None


@dataclass
class Version:
    label: str
    source: str
    mechanism: str | None  # the mechanism this version adds over the previous one
    origin: str


def declared_mechanism(source: str) -> str | None:
    m = _STEP.search("\n".join(source.splitlines()[:5]))
    return m.group(1) if m else None


def ladder_from_folder(workload_dir: Path) -> list[Version]:
    """naive.cu, versions/*.cu (sorted), expert.cu; ProposerError when the folder has no ladder."""
    vdir = workload_dir / "versions"
    files = sorted(vdir.glob("*.cu")) if vdir.is_dir() else []
    if not files:
        raise ProposerError(f"{workload_dir} has no versions/*.cu ladder: add one, or use --proposer rules")
    chain = [workload_dir / "naive.cu", *files, workload_dir / "expert.cu"]
    # expert.cu is shared with the rules walk and the gate records, so its step may be declared
    # beside the ladder instead of in its header: versions/ladder.toml, `expert_adds = "NAME"`.
    top_decl = None
    meta = vdir / "ladder.toml"
    if meta.is_file():
        import tomllib
        try:
            raw = tomllib.loads(meta.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ProposerError(f"{meta} is not valid TOML ({e}): fix it") from e
        unknown = sorted(set(raw) - {"expert_adds", "description"})
        if unknown:
            raise ProposerError(f"{meta}: unknown key {unknown[0]!r} (allowed: expert_adds, description)")
        top_decl = raw.get("expert_adds")
    out = []
    for i, p in enumerate(chain):
        if not p.is_file():
            raise ProposerError(f"ladder of {workload_dir} needs {p.name}: add it")
        text = p.read_text()
        mech = declared_mechanism(text) if i > 0 else None
        if i == len(chain) - 1 and mech is None:
            mech = top_decl
        if i > 0 and mech is None:
            raise ProposerError(f"{p} does not declare its step: start it with `// klineage-step: mechanism=NAME`"
                                + (" or set expert_adds in versions/ladder.toml" if i == len(chain) - 1 else ""))
        out.append(Version(p.stem, text, mech, display_path(p)))
    return out


def ladder_from_git(path: Path) -> list[Version]:
    """The committed versions of one file, oldest first (each commit after the first declares its
    mechanism in the file header or in the commit subject as `mechanism=NAME`)."""
    try:
        log = subprocess.run(["git", "log", "--follow", "--reverse", "--format=%H %s", "--", path.name],
                             cwd=path.parent, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise ProposerError(f"cannot read the git history of {path}: {e}; pass a versions/ folder instead") from e
    out = []
    for line in log.splitlines():
        sha, _, subject = line.partition(" ")
        rel = subprocess.run(["git", "ls-files", "--full-name", path.name], cwd=path.parent,
                             capture_output=True, text=True).stdout.strip() or path.name
        text = subprocess.run(["git", "show", f"{sha}:{rel}"], cwd=path.parent, capture_output=True,
                              text=True).stdout
        m = declared_mechanism(text) or (re.search(r"mechanism=(\w+)", subject) or [None, None])[1]
        out.append(Version(sha[:12], text, m if out else None, f"{path}@{sha[:12]}"))
    if len(out) < 2:
        raise ProposerError(f"{path} has fewer than two committed versions: nothing to walk")
    return out


class VersionsProposer:
    name = "versions"

    def __init__(self, ladder: list[Version]):
        self.ladder = ladder
        self._index = {source_hash(v.source): i for i, v in enumerate(ladder)}

    @property
    def top(self) -> Version:
        return self.ladder[-1]

    def propose(self, source: str, features: list[Feature], tried: set) -> Iterator[Proposal | tuple]:
        i = self._index.get(source_hash(source))
        if i is None or i == 0:
            return
        cur, prev = self.ladder[i], self.ladder[i - 1]
        key = (cur.mechanism, f"version:{cur.label}")
        if key in tried:
            return
        yield Proposal(self.name, cur.mechanism, f"version:{cur.label}", prev.source,
                       before=f"{Path(cur.origin).name}", after=f"{Path(prev.origin).name}",
                       config={"version": cur.label, "previous": prev.label}, declared=True, origin=prev.origin)

    def rederive(self, proposal: Proposal) -> str | None:
        i = next((j for j, v in enumerate(self.ladder) if v.label == proposal.config["version"]), None)
        return self.ladder[i].source if i is not None else None


PROPOSERS = ("rules", "versions", "llm")


def make_proposer(name: str, workload_dir: Path | None = None, llm=None):
    if name == "rules":
        return RulesProposer()
    if name == "versions":
        if workload_dir is None:
            raise ProposerError("the versions proposer needs a workload folder with a versions/ ladder")
        return VersionsProposer(ladder_from_folder(workload_dir))
    if name == "llm":
        if llm is None:
            raise ProposerError("the llm proposer needs a model client: set ANTHROPIC_API_KEY (or --base-url for an "
                                "OpenAI-compatible server) and pass --proposer llm to klineage mine")
        from klineage.lineage.llm_proposer import LLMProposer
        return LLMProposer(llm)
    raise ProposerError(f"unknown proposer {name!r}: choose one of rules, versions, llm")
