"""Charts of the HTML report, drawn by matplotlib and saved as SVG files.

Figures are made with ``matplotlib.figure.Figure`` (no pyplot, no global state, no GUI backend).
The SVGs are deterministic: no date in the metadata, a fixed hash salt for element ids, and text
kept as text (``svg.fonttype = none``) so the browser draws it with its own fonts, offline.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

_RC = {"svg.hashsalt": "klineage-report", "svg.fonttype": "none", "font.size": 9,
       "axes.spines.top": False, "axes.spines.right": False}
_COLORS = ("#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a7a8a", "#57606a")
FASTER, SLOWER = "#1a7f37", "#d1242f"


def _tone(speedup: float) -> str:
    """Green for a step beyond +0.5%, red below -0.5%, grey in between."""
    return FASTER if speedup > 1.005 else SLOWER if speedup < 0.995 else "#57606a"


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context(_RC):
        fig.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight")
    return path


def _figure(width: float, height: float) -> Figure:
    with matplotlib.rc_context(_RC):
        return Figure(figsize=(width, height), layout="constrained")


def _log_if_wide(ax, values: list[float]) -> None:
    vals = [v for v in values if v and v > 0]
    if vals and max(vals) / min(vals) > 8:
        ax.set_yscale("log")


LONG_WALK = 24  # states past which a walk is drawn top to bottom, one readable row per state


def walk_chart(path: Path, labels: list[str], series: list[dict], title: str) -> Path:
    """The latency staircase of one lineage, read forward (simplest state first).

    labels: one label per state (the first is the simplest kernel, then the mechanism each step
    adds); series: one per benchmark case, {"label", "latency_us": [per state], "speedups": [per
    step, len(labels) - 1]}. Up to LONG_WALK states the states run left to right; a longer walk
    runs top to bottom in a figure as tall as it needs (0.26 in a state), so its labels keep their
    size at the page's width instead of shrinking with a wider figure."""
    if len(labels) > LONG_WALK:
        return _walk_chart_tall(path, labels, series, title)
    with matplotlib.rc_context(_RC):
        fig = _figure(max(7.5, 0.55 * len(labels) + 3.0), 4.8)
        ax = fig.add_subplot()
        xs = list(range(len(labels)))
        for i, s in enumerate(series):
            color = _COLORS[i % len(_COLORS)]
            ax.plot(xs, s["latency_us"], drawstyle="steps-post", color=color, linewidth=1.4, alpha=0.55)
            ax.plot(xs, s["latency_us"], "o", color=color, markersize=4, label=s["label"])
            for x, (y, sp) in enumerate(zip(s["latency_us"][1:], s["speedups"]), start=1):
                ax.annotate(f"{sp:.2f}x", (x, y), textcoords="offset points", xytext=(0, 7 if i % 2 == 0 else -12),
                            ha="center", fontsize=6.5, color=_tone(sp))
        _log_if_wide(ax, [v for s in series for v in s["latency_us"]])
        ax.set_xticks(xs, labels, rotation=55, ha="right", fontsize=7.5)
        ax.set_ylabel("latency (us, median of trials)")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7.5, loc="best")
    return _save(fig, path)


def _walk_chart_tall(path: Path, labels: list[str], series: list[dict], title: str) -> Path:
    with matplotlib.rc_context(_RC):
        fig = _figure(8.0, max(4.8, 0.26 * len(labels) + 1.6))
        ax = fig.add_subplot()
        ys = list(range(len(labels)))
        for i, s in enumerate(series):
            color = _COLORS[i % len(_COLORS)]
            ax.plot(s["latency_us"], ys, drawstyle="steps-pre", color=color, linewidth=1.4, alpha=0.55)
            ax.plot(s["latency_us"], ys, "o", color=color, markersize=4, label=s["label"])
            for y, (x, sp) in enumerate(zip(s["latency_us"][1:], s["speedups"]), start=1):
                ax.annotate(f"{sp:.2f}x", (x, y), textcoords="offset points", xytext=(8 + 34 * i, -3),
                            ha="left", fontsize=7, color=_tone(sp))
        vals = [v for s in series for v in s["latency_us"] if v and v > 0]
        if vals and max(vals) / min(vals) > 8:
            ax.set_xscale("log")
        ax.set_yticks(ys, labels, fontsize=8)
        ax.set_ylim(len(labels) - 0.5, -0.5)  # the simplest kernel on top, the expert at the bottom
        ax.set_xlabel("latency (us, median of trials)")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=7.5, loc="upper right")
    return _save(fig, path)


def speedup_bars(path: Path, labels: list[str], speedups: list[float], title: str,
                 xlabel: str = "forward speedup (x)") -> Path:
    """Horizontal bars, one per case, with the 1.0x line (the skill card's effects)."""
    with matplotlib.rc_context(_RC):
        fig = _figure(6.5, max(1.6, 0.38 * len(labels) + 1.0))
        ax = fig.add_subplot()
        ys = list(range(len(labels)))
        ax.barh(ys, speedups, color=[_tone(s) for s in speedups], height=0.6)
        for y, s in zip(ys, speedups):
            ax.annotate(f"{s:.3f}x", (s, y), textcoords="offset points", xytext=(4, -3), fontsize=7)
        ax.axvline(1.0, color="#57606a", linewidth=0.8, linestyle="--")
        ax.set_yticks(ys, labels, fontsize=7.5)
        ax.invert_yaxis()
        ax.set_xlim(0, max([1.0] + speedups) * 1.18)
        ax.set_xlabel(xlabel)
        ax.set_title(title, fontsize=10)
    return _save(fig, path)


GROUPED_MAX_WIDTH = 11.0  # inches: a wider figure is scaled down to the page, and its text with it


def grouped_bars(path: Path, groups: list[str], conditions: list[str], values: dict[tuple[str, str], float],
                 title: str, ylabel: str, intervals: dict[tuple[str, str], tuple[float, float]] | None = None) -> Path:
    """Bars per group (x) and condition (colour, one of its own per condition); values[(group,
    condition)], missing pairs left out; `intervals[(group, condition)]` = (low, high) drawn as error
    bars where given. The legend (above the plot, in the page's text size) names every condition, a
    condition without a bar marked "(no result)". The figure is at most GROUPED_MAX_WIDTH wide, so the
    page never scales its text down."""
    from matplotlib.patches import Patch
    intervals = intervals or {}
    colors = _distinct_colors(len(conditions))
    with matplotlib.rc_context(_RC):
        fig = _figure(min(GROUPED_MAX_WIDTH, max(6.0, 0.55 * len(groups) * max(1, len(conditions)) ** 0.5 + 2.5)), 4.6)
        ax = fig.add_subplot()
        width = 0.8 / max(1, len(conditions))
        handles = []
        for j, cond in enumerate(conditions):
            xs = [i + (j - (len(conditions) - 1) / 2) * width for i, g in enumerate(groups) if (g, cond) in values]
            keys = [(g, cond) for g in groups if (g, cond) in values]
            ys = [values[k] for k in keys]
            if xs:
                ax.bar(xs, ys, width=width, color=colors[j])
            handles.append(Patch(facecolor=colors[j], label=cond if xs else f"{cond} (no result)"))
            bars = [(x, values[k], intervals[k]) for x, k in zip(xs, keys) if k in intervals]
            if bars:
                ax.errorbar([b[0] for b in bars], [b[1] for b in bars],
                            yerr=[[b[1] - b[2][0] for b in bars], [b[2][1] - b[1] for b in bars]],
                            fmt="none", ecolor="#24292f", elinewidth=0.8, capsize=2)
        ax.axhline(1.0, color="#57606a", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(len(groups)), groups, rotation=30, ha="right", fontsize=8.5)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=11)
        ax.legend(handles=handles, fontsize=9, loc="lower center", bbox_to_anchor=(0.5, 1.08),
                  ncol=min(len(handles), 5), frameon=False)
    return _save(fig, path)


def _distinct_colors(n: int) -> list[str]:
    """n colours, no two alike: the palette, then evenly spaced hues past its length."""
    if n <= len(_COLORS):
        return list(_COLORS[:n])
    import colorsys
    extra = [colorsys.hsv_to_rgb((k / (n - len(_COLORS))) % 1.0, 0.65, 0.75) for k in range(n - len(_COLORS))]
    return list(_COLORS) + ["#%02x%02x%02x" % tuple(int(255 * c) for c in rgb) for rgb in extra]


def curves(path: Path, series: dict[str, list[float | None]], title: str, xlabel: str, ylabel: str,
           baseline: tuple[str, float] | None = None) -> Path:
    """One line per series over x = 0, 1, ... (None values left out); `baseline` (label, y) drawn as a
    dashed horizontal line."""
    colors = _distinct_colors(len(series))
    with matplotlib.rc_context(_RC):
        fig = _figure(6.5, 3.6)
        ax = fig.add_subplot()
        for j, (label, ys) in enumerate(series.items()):
            pts = [(x, y) for x, y in enumerate(ys) if y is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, linewidth=1.2, label=label,
                    color=colors[j])
        if baseline is not None:
            ax.axhline(baseline[1], color="#57606a", linewidth=0.8, linestyle="--", label=baseline[0])
        n = max((len(ys) for ys in series.values()), default=1)
        ax.set_xticks(range(n))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=9)
    return _save(fig, path)
