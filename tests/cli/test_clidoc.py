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


def test_the_usage_line_reads_the_same_whatever_click_release_formats_it():
    """click 8.4.0 prints `COMMAND` where 8.4.2 prints `[COMMAND]` for a group that runs without a
    subcommand: the reference shows it one way (optional there, required elsewhere)."""
    import click

    from klineage.clidoc import _usage

    @click.group(invoke_without_command=True)
    def optional():
        """A group that runs alone."""

    @click.group()
    def required():
        """A group that needs a subcommand."""
    for printed in ("Usage: x [OPTIONS] COMMAND [ARGS]...", "Usage: x [OPTIONS] [COMMAND] [ARGS]..."):
        text = printed + "\n\n  COMMAND in the help text stays.\n"
        assert _usage(optional, text) == "Usage: x [OPTIONS] [COMMAND] [ARGS]...\n\n  COMMAND in the help text stays.\n"
        assert _usage(required, text).splitlines()[0] == "Usage: x [OPTIONS] COMMAND [ARGS]..."
