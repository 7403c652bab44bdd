"""docs/bring-your-own-kernel.md, followed as written in an empty folder: every block marked
`file=PATH` is written there, every `$ ` line of a console block is run (with `klineage` the CLI
of this checkout), and every output line the page shows appears in the command's output, in order
(`...` stands for lines the page leaves out). The README points to the page."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "bring-your-own-kernel.md"
FENCE = re.compile(r"^```(\S*)([^\n]*)\n(.*?)^```\s*$", re.S | re.M)


def steps(text: str) -> list[tuple[str, str, object]]:
    """("file", path, content) and ("run", command, [expected lines]) in page order."""
    out = []
    for lang, info, body in FENCE.findall(text):
        m = re.search(r"\bfile=(\S+)", info)
        if m:
            out.append(("file", m.group(1), body))
        elif lang == "console":
            for chunk in re.split(r"^\$ ", body, flags=re.M)[1:]:
                cmd, *expected = chunk.rstrip("\n").split("\n")
                out.append(("run", cmd, expected))
    return out


def test_the_page_has_the_steps_and_the_readme_points_to_it():
    s = steps(DOC.read_text())
    files = [p for kind, p, _ in s if kind == "file"]
    assert files[0].endswith("workload.py") and any(p.endswith("expert.cu") for p in files)
    assert sum(kind == "run" and "--dry-run" in c for kind, c, _ in s) >= 3
    assert "docs/bring-your-own-kernel.md" in (ROOT / "README.md").read_text()


@pytest.mark.nvcc
def test_following_the_page_from_an_empty_folder(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cli = f"{sys.executable} -m klineage.cli"
    for kind, what, content in steps(DOC.read_text()):
        if kind == "file":
            p = tmp_path / what
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(content)
            continue
        cmd = re.sub(r"^klineage\b", cli, what)
        r = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        got = (r.stdout + r.stderr).splitlines()
        want = [line for line in content if line.strip() != "..."]
        if not any(line.startswith("Error:") for line in want):
            assert r.returncode == 0, (what, r.stdout[-2000:], r.stderr[-2000:])
        pos = 0
        for line in want:
            hit = next((i for i in range(pos, len(got)) if got[i].rstrip() == line.rstrip()), None)
            assert hit is not None, f"{what}: the page shows\n{line}\nbut the command printed\n" + "\n".join(got)
            pos = hit + 1
