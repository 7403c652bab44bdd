"""Held-out instances: `<root>/<instance>/workload.py`, a standard workload module with

    FAMILY           "gemm" | "attention" | "reduction"
    STARTS           {"idiom": "kernels/x.cu", "naive": "kernels/y.cu"}: start kernels, paths
                     relative to the held-out root ("naive" only for reductions)
    VENDOR_NAME      the primary performance reference (the FlagGems Triton kernel)
    VENDOR_FALLBACK  (optional) text naming the reference used when the primary fails to import or run,
    vendor_fallback(inputs, shape)  and the function that runs it.

The fallback runs through a generated workload file (under $KLINEAGE_HOME) that executes the
instance's own file and then rebinds `vendor` and `VENDOR_NAME` to the fallback, so the gate worker
times it like any reference; its content hash is derived from the instance's (sha256 of the
instance hash and the word "fallback"), so its evaluations are keyed apart from the primary's and
the same on every machine.
"""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from klineage import settings
from klineage.errors import KLineageError, read_source
from klineage.gate.gate import kernel_hash
from klineage.workload import Workload, load_workload, write_generated

FAMILIES = ("gemm", "attention", "reduction")


class HeldoutError(KLineageError):
    """A held-out folder or instance that cannot be used; the message names the fix."""
    exit_code = 2


@dataclass
class Instance:
    name: str
    dir: Path
    family: str
    workload: Workload                      # with the primary reference
    starts: dict[str, tuple[str, str]]      # kind -> (path relative to the root, source)
    fallback_name: str | None = None
    _fallback: Workload | None = field(default=None, repr=False)

    @property
    def has_fallback(self) -> bool:
        return self.fallback_name is not None

    def fallback(self) -> Workload:
        """The instance's workload with its fallback reference (see the module docstring)."""
        if self._fallback is None:
            self._fallback = _fallback_workload(self)
        return self._fallback

    def identity(self) -> dict:
        """What a run id depends on: the workload file and the start kernels, by content."""
        return {"name": self.name, "workload": self.workload.content_hash,
                "starts": {k: kernel_hash(src) for k, (_, src) in sorted(self.starts.items())}}


def discover(root: Path) -> list[Path]:
    """Instance folders of a held-out root (sub-folders holding workload.py), sorted by name."""
    root = Path(root)
    if not root.is_dir():
        raise HeldoutError(f"{root} is not a folder: pass the held-out root (default heldout/)")
    found = sorted(p for p in root.iterdir() if (p / "workload.py").is_file())
    if not found:
        raise HeldoutError(f"{root} holds no instance folder (<instance>/workload.py): pass the held-out root")
    return found


def load_instance(d: Path, root: Path) -> Instance:
    """Load and check one instance folder; HeldoutError naming the field otherwise."""
    wl = load_workload(d)
    mod = wl.module
    where = f"{d / 'workload.py'}"
    if wl.family not in FAMILIES:
        raise HeldoutError(f"{where}: FAMILY = {wl.family!r}: a held-out instance is one of {', '.join(FAMILIES)}")
    starts = getattr(mod, "STARTS", None)
    if not isinstance(starts, dict) or "idiom" not in starts:
        raise HeldoutError(f"{where}: STARTS must be a dict with at least an 'idiom' kernel path "
                           "(relative to the held-out root), e.g. {'idiom': 'kernels/x.cu'}")
    bad = sorted(set(starts) - {"idiom", "naive"})
    if bad:
        raise HeldoutError(f"{where}: STARTS key {bad[0]!r} unknown (allowed: idiom, naive)")
    loaded = {}
    for kind, rel in sorted(starts.items()):
        p = Path(root) / rel
        if not p.is_file():
            raise HeldoutError(f"{where}: STARTS[{kind!r}] = {rel!r}: no such file under {root}")
        loaded[kind] = (str(rel), read_source(p))
    fb = getattr(mod, "VENDOR_FALLBACK", None)
    if fb is not None and (not isinstance(fb, str) or not callable(getattr(mod, "vendor_fallback", None))):
        raise HeldoutError(f"{where}: VENDOR_FALLBACK needs a text and a function vendor_fallback(inputs, shape)")
    return Instance(wl.name, Path(d), wl.family, wl, loaded, fb)


def load_instances(root: Path, families: list[str] | None = None, names: list[str] | None = None) -> list[Instance]:
    """The instances of `root`, optionally only those of `families` / named in `names` (each name
    must exist), sorted by family then name."""
    found = [load_instance(d, root) for d in discover(root)]
    if names:
        have = {i.name for i in found} | {i.dir.name for i in found}
        missing = sorted(set(names) - have)
        if missing:
            raise HeldoutError(f"no instance {missing[0]!r} under {root} (instances: "
                               f"{', '.join(sorted(i.name for i in found))})")
        found = [i for i in found if i.name in names or i.dir.name in names]
    if families:
        bad = sorted(set(families) - set(FAMILIES))
        if bad:
            raise HeldoutError(f"unknown family {bad[0]!r}: choose from {', '.join(FAMILIES)}")
        found = [i for i in found if i.family in families]
    if not found:
        raise HeldoutError(f"no instance under {root} matches the filters (families {families}, instances {names})")
    return sorted(found, key=lambda i: (FAMILIES.index(i.family), i.name))


_SHIM = '''# Generated by klineage heldout: the instance {name} with its fallback performance reference.
# It runs the instance's own workload file, then makes vendor_fallback the reference.
import pathlib as _pathlib
import sys as _sys

__file__ = {path!r}
if str(_pathlib.Path(__file__).parent.parent) not in _sys.path:  # the corpus's shared modules
    _sys.path.insert(0, str(_pathlib.Path(__file__).parent.parent))
exec(compile(_pathlib.Path(__file__).read_text(), __file__, "exec"))
VENDOR_NAME = VENDOR_FALLBACK
vendor = vendor_fallback
'''


def _fallback_workload(inst: Instance) -> Workload:
    src = _SHIM.format(name=inst.name, path=str(inst.workload.path))
    p = settings.data_dir() / "heldout_fallback" / hashlib.sha256(src.encode()).hexdigest()[:16] / "workload.py"
    write_generated(p, src.encode())
    return dataclasses.replace(load_workload(p), content_hash=fallback_hash(inst.workload.content_hash))


def fallback_hash(content_hash: str) -> str:
    """The content hash the fallback-reference workload of an instance is keyed by."""
    return hashlib.sha256(f"{content_hash}:fallback".encode()).hexdigest()
