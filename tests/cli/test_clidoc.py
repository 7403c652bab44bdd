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


def test_every_listing_command_has_json_and_long_runs_have_quiet():
    cmds = {" ".join(p): c for p, c in walk(main, ["klineage"])}
    for name, cmd in cmds.items():
        params = {p.name for p in cmd.params}
        if name.split()[-1] in ("list", "show", "stats", "why", "toolchain"):
            assert "as_json" in params, name
    for name in ("klineage mine", "klineage run", "klineage apply", "klineage heldout"):
        assert {"as_json", "quiet"} <= {p.name for p in cmds[name].params}, name
