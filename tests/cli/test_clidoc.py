"""The CLI reference (docs/cli.md) is the commands' own help, regenerated and compared; every
command and option has a help text."""
from pathlib import Path

from klineage.cli import main
from klineage.clidoc import reference, undocumented, walk

ROOT = Path(__file__).resolve().parents[2]


def test_every_command_and_option_is_documented():
    assert undocumented(main) == []
    names = {" ".join(p) for p, _ in walk(main, ["klineage"])}
    assert {"klineage run", "klineage apply", "klineage apply show", "klineage mine", "klineage skills export"} <= names


def test_cli_reference_is_current():
    want = reference(main)
    have = (ROOT / "docs" / "cli.md").read_text()
    assert have == want, "docs/cli.md is out of date: run `python -m klineage.clidoc > docs/cli.md`"
