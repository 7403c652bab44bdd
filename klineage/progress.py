"""Progress of a long command on stderr: a rich progress display with totals and an ETA on a
terminal, plain lines otherwise (a log file or a pipe gets no carriage returns or escape codes)."""
from __future__ import annotations

import time

import click
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress as _RichProgress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)


class Progress:
    """Named tasks, each with a description, an optional total and a note (e.g. counts by status).

    On a terminal: one rich bar per task (done/total, elapsed, remaining). Elsewhere: a plain line
    on each `advance` (and on `line`), `[description] done/total · note · 12 s`. `quiet`: nothing."""

    def __init__(self, quiet: bool = False, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.quiet = quiet
        self.live = not quiet and self.console.is_terminal
        self._tasks: dict[str, dict] = {}
        self._t0 = time.monotonic()
        self._bar = None
        if self.live:
            self._bar = _RichProgress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                      MofNCompleteColumn(), TextColumn("{task.fields[note]}"), TimeElapsedColumn(),
                                      TimeRemainingColumn(), console=self.console, transient=False)
            self._bar.start()

    def task(self, key: str, description: str, total: int | None = None) -> None:
        """Start (or restart) the task `key`."""
        t = self._tasks.get(key)
        if t is None:
            t = self._tasks[key] = {"done": 0, "total": total, "description": description, "note": "", "id": None}
            if self._bar is not None:
                t["id"] = self._bar.add_task(description, total=total, note="")
        else:
            t.update(description=description, total=total)
            self._refresh(t)

    def update(self, key: str, advance: int = 0, total: int | None = None, description: str | None = None,
               note: str | None = None, say: bool = False) -> None:
        """Move the task on by `advance`, set its total, description or note; off a terminal a plain
        line is printed when it moves (or when `say`, e.g. a long phase starting)."""
        t = self._tasks.get(key)
        if t is None:
            self.task(key, description or key, total)
            t = self._tasks[key]
        t["done"] += advance
        if total is not None:
            t["total"] = total
        if t["total"] is not None and t["done"] > t["total"]:
            t["total"] = t["done"]
        if description is not None:
            t["description"] = description
        if note is not None:
            t["note"] = note
        self._refresh(t)
        if (advance or say) and not self.live:
            self._plain(t)

    def set(self, key: str, completed: int, total: int | None = None) -> None:
        """Set the task's count of work done (and its total)."""
        t = self._tasks.get(key)
        self.update(key, advance=completed - (t["done"] if t else 0), total=total)

    def line(self, text: str) -> None:
        """One message above the bars (a plain line off a terminal)."""
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
        else:
            click.echo(text, err=True)

    def _refresh(self, t: dict) -> None:
        if self._bar is not None and t["id"] is not None:
            self._bar.update(t["id"], completed=t["done"], total=t["total"], description=t["description"],
                             note=t["note"])

    def _plain(self, t: dict) -> None:
        if self.quiet:
            return
        count = f"{t['done']}/{t['total']}" if t["total"] is not None else str(t["done"])
        note = f" · {t['note']}" if t["note"] else ""
        click.echo(f"[{t['description']}] {count}{note} · {time.monotonic() - self._t0:.0f} s", err=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
