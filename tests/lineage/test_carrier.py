"""A ladder step's carrier (klineage.lineage.lift._changed_code) shows code whole or with a visible
`// ...` wherever code is left out: read in order, the shown lines are the kernel's own code lines,
and two shown lines that are not neighbours in the kernel always have a `// ...` between them."""
from __future__ import annotations

from pathlib import Path

import pytest

from klineage.gate.guard import strip_comments
from klineage.lineage.lift import ELIDED, _changed_code

ROOT = Path(__file__).resolve().parents[2]


def _code_lines(src: str) -> list[str]:
    return [o for o, c in zip(src.splitlines(), strip_comments(src)[0].splitlines()) if c.strip()]


def _ladder_pairs():
    for d in sorted((ROOT / "expert_kernels").glob("*/versions")):
        files = sorted(d.glob("*.cu")) + [d.parent / "expert.cu"]
        for simpler, richer in zip(files, files[1:]):
            yield pytest.param(simpler, richer, id=f"{d.parent.name}:{simpler.stem}->{richer.stem}")


def _check_side(shown: str, source: str, limit: int) -> None:
    """Some placing of the shown lines on the kernel's code lines, in order, puts every two shown
    lines that are not neighbours there on either side of a `// ...` (and a cut end after one)."""
    code = _code_lines(source)
    lines = shown.splitlines()
    places, gap = {-1}, True  # where the last shown line may sit; a `// ...` since it
    for line in lines:
        if line.strip().startswith(ELIDED):
            gap = True
            continue
        places = {i for i, c in enumerate(code) if c == line and any(i == j + 1 or (gap and i > j) for j in places)}
        assert places, f"{line!r}: not the kernel's next code line, and no `// ...` before it"
        gap = False
    if lines and not gap:
        assert len(code) - 1 in places, "code left out at the end without a marker"
    assert len(lines) <= limit + 1


@pytest.mark.parametrize("simpler,richer", list(_ladder_pairs()))
def test_every_ladder_carrier_marks_what_it_leaves_out(simpler, richer):
    a, b = simpler.read_text(), richer.read_text()
    before, after = _changed_code(a, b)
    _check_side(before, a, 40)
    _check_side(after, b, 40)


def test_a_small_change_is_shown_with_its_neighbours_and_markers():
    a = "int f(int x,\n      int y) {\n  int s = x;\n  s += y;\n  return s;\n}\nint g() { return 1; }\n"
    b = a.replace("  s += y;\n", "  s += 2 * y;\n")
    before, after = _changed_code(a, b)
    assert before.splitlines() == ["  // ...", "  int s = x;", "  s += y;", "  return s;", "  // ..."]
    assert after.splitlines()[2] == "  s += 2 * y;"
    ins = a.replace("  return s;\n", "  s *= 2;\n  return s;\n")
    before, after = _changed_code(a, ins)  # nothing removed: the place of the insertion is shown
    assert before.splitlines() == ["  // ...", "  s += y;", "  return s;", "  // ..."]
    assert "  s *= 2;" in after.splitlines()


def test_a_long_change_says_how_much_is_left_out():
    a = "void k() {\n}\n"
    b = "void k() {\n" + "".join(f"  x{i}();\n" for i in range(60)) + "}\n"
    _, after = _changed_code(a, b, limit=10)
    assert after.splitlines()[-1] == "// ... 52 more lines"
