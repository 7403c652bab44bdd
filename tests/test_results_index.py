"""benchmarks/results/README.md indexes the recorded results: every file or folder its tables name
exists and is not empty (a deleted record fails here, whatever else reads it), and every file under
benchmarks/results/ is named there (a record nobody can find is not evidence).

A table's first cell names its records in backticks: a file (`gate_h200.json`), the same stem with
another ending (`/ .log`), a folder (`heldout_h200/`, `dev_h200/*`), a glob (`*_best.cu`), a record
named by its card (`rederive_<card>.json`: exactly one of any card), or a path from the repository
root (`skills_db/...`). After a path with a folder, the cell's bare names are in that folder.
A name of a record not made yet fails too: the README says what the next device call records."""
import fnmatch
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RES = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))
from record_names import find  # noqa: E402


def named() -> list[tuple[str, str]]:
    """(kind, path relative to RES or, for kind 'root', to ROOT) for every record the README names."""
    out = []
    for line in (RES / "README.md").read_text().splitlines():
        if not line.startswith("| `"):
            continue
        folder, prev = "", None
        for tok in re.findall(r"`([^`]+)`", line.split("|")[1]):
            if " " in tok:
                continue
            if tok.startswith("skills_db/") or (folder.startswith("skills_db/") and "/" not in tok):
                tok = tok if tok.startswith("skills_db/") else folder + tok
                folder = tok.rsplit("/", 1)[0] + "/"
                out.append(("root", tok))
                continue
            if tok.startswith(".") and prev:
                tok = re.sub(r"(\.[a-z]+)+$", "", prev) + tok
            elif "/" in tok and not tok.endswith(("/", "/*")):
                folder = tok.rsplit("/", 1)[0] + "/"
            elif not tok.endswith(("/", "/*")):
                tok = folder + tok if "/" not in tok else tok
            prev = tok
            kind = ("card" if "<card>" in tok else "folder" if tok.endswith(("/", "/*")) else
                    "glob" if "*" in tok else "file")
            out.append((kind, tok.removesuffix("*") if kind == "folder" else tok))
    return out


def _card_hits(rel: str) -> list[Path]:
    parent = RES / rel.rstrip("/").rsplit("/", 1)[0] if "/" in rel.rstrip("/") else RES
    return find(parent, rel.rstrip("/").rsplit("/", 1)[-1].replace("<card>", "{card}"))


def test_every_named_record_exists_and_is_not_empty():
    items = named()
    assert len(items) > 40
    missing = []
    for kind, rel in items:
        if kind == "root":
            ok = (ROOT / rel).is_file() and (ROOT / rel).stat().st_size > 0
        elif kind == "file":
            ok = (RES / rel).is_file() and (RES / rel).stat().st_size > 0
        elif kind == "folder":
            ok = (RES / rel).is_dir() and any(p.is_file() and p.stat().st_size for p in (RES / rel).rglob("*"))
        elif kind == "glob":
            ok = any(p.stat().st_size for p in RES.glob(rel))
        else:  # exactly one record of this name, of any card
            hits = _card_hits(rel)
            ok = len(hits) == 1 and (hits[0].is_dir() or hits[0].stat().st_size > 0)
        if not ok:
            missing.append(rel)
    assert not missing, f"named in benchmarks/results/README.md but missing or empty: {missing}"


def test_every_recorded_file_is_named():
    items = [(k, r) for k, r in named() if k != "root"]
    pats = []
    for kind, rel in items:
        if kind == "card":
            pats += [p.relative_to(RES).as_posix() + ("/" if p.is_dir() else "") for p in _card_hits(rel)]
        else:
            pats.append(rel)

    def covered(f: str) -> bool:
        return any(f.startswith(p) if p.endswith("/") else fnmatch.fnmatchcase(f, p) for p in pats)
    files = sorted(p.relative_to(RES).as_posix() for p in RES.rglob("*") if p.is_file())
    loose = [f for f in files if f != "README.md" and not covered(f)
             and not f.startswith("heldout_h200/report/kernels/")]  # written by a replay, ignored by git
    assert not loose, f"files under benchmarks/results/ that README.md does not name: {loose}"
