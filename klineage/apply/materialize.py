"""Materialize: turn a retrieved skill into a concrete candidate kernel. One registry, three backends.

  rules  the mechanism's forward (`reoptimize`) rewrite at a matching anchor of the current kernel,
         kept only when it adds that mechanism and nothing else (the detectors' audit);
  sweep  for kernels that expose tunable configuration by the corpus's documented convention,
             #ifndef NAME
             #define NAME <integer>
             #endif
         a sweep of 5-7 points a round over those constants (the head of sweep_order, which ranks
         the whole grid), passed as -DNAME=value, steered by the retrieved skills: values their
         cards' example configurations name for constants of the same role (block size, unroll /
         vector / coarsening factor) come first, then the default's neighbours;
         the winner is written back into the source (`bake`), so the kept kernel stands alone;
             or, for a control without the library (`random_points`), points drawn at random
             from the same axes' default and neighbours;
  llm    klineage.apply.llm (Anthropic Messages API, or an OpenAI-compatible server): the skill's card
         verbatim, the current kernel, the workload contract and the last gate feedback.

Each backend returns Candidates; the loop gates each one. A backend that has nothing for a skill
returns [] (and says why in `why_not`).
"""
from __future__ import annotations

import itertools
import os
import random
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from klineage.mechanisms.forward import rewrite_for
from klineage.records import SkillCard, as_card, to_plain
from klineage.tuning import matches
from klineage.tuning import axis as _axis
from klineage.tuning import role as _role
from klineage.workload import Workload

TUNABLE_RE = re.compile(r"#ifndef (\w+)\s*\n\s*#define \1 (\d+)\b[^\n]*\n\s*#endif")
MAX_SWEEP = 7
MIN_SWEEP = 5
MAX_AXES = 4    # tunables one sweep varies at most
MIN_GRID = 24   # configurations the swept axes should span (see _axes)
MAX_JOINT = 2   # configurations of the cards (several axes at once) among a round's points at most
SWEEP_AXES = ("source", "buildable")  # how a sweep counts its grid: every point, or those that build

# (source, points) -> whether the kernel builds at each point: NvccFrontEnd
Buildable = Callable[[str, list[dict[str, int]]], list[bool]]


@dataclass
class Candidate:
    source: str
    backend: str
    skill_id: str | None
    skill: str | None
    flags: tuple[str, ...] = ()
    config: dict = field(default_factory=dict)
    note: str = ""
    exchange: dict | None = None  # the llm backend's call record (never the key)
    steered_by: tuple[str, ...] = ()  # sweep: per value moved, the highest-ranked skill whose card names it


def tunables(source: str) -> dict[str, int]:
    """{NAME: default} of the source's overridable integer constants, in file order."""
    return {m.group(1): int(m.group(2)) for m in TUNABLE_RE.finditer(source)}


def bake(source: str, values: dict[str, int]) -> str:
    """The source with the defaults of `values` rewritten (the same kernel as -DNAME=value)."""
    def sub(m):
        name = m.group(1)
        if name not in values:
            return m.group(0)
        return m.group(0).replace(f"#define {name} {m.group(2)}", f"#define {name} {values[name]}", 1)
    return TUNABLE_RE.sub(sub, source)


def _card(skill: dict) -> SkillCard | None:
    """A library row's card as a SkillCard; None for a skill without one (the random control's)."""
    return as_card(skill["card"]) if skill.get("card") else None


def _measured(skill: dict) -> list[list[dict]]:
    """The quantitative configurations of the kernels a skill was measured in (its card's
    carrier.measured_configuration: one list of {name, value, role[, axis]} per kernel)."""
    card = _card(skill)
    return [] if card is None else [[to_plain(v) for v in m.values] for m in card.carrier.measured_configuration]


def _steered(skills: list[dict], name: str) -> list[int]:
    """Integer values the skills' cards give for the constant `name` (by its role, and for a tile
    extent its axis): their example configurations name macros with values (coarsening: CE_UNROLL =
    4) and launch bounds with literal block sizes; their measured configurations give the constants
    of the kernels they were measured in (the gemm expert's GEMM_BN = 256 for a BLOCK_N)."""
    role = _role(name)
    vals: list[int] = []
    if role is None:
        return vals
    for s in skills:
        card = _card(s)
        for ex in [] if card is None else card.carrier.example_configuration:
            ex_name = str(ex.get("name", ""))
            item = {"role": _role(ex_name), "axis": _axis(ex_name)}
            if isinstance(ex.get("value"), int) and item["role"] and matches(name, item):
                vals.append(ex["value"])
            if role == "block":
                m = re.fullmatch(r"\((\d+)(?:,\s*\d+)?\)", str(ex.get("args", "")))
                if m:
                    vals.append(int(m.group(1)))
        for cfg in _measured(s):
            vals += [it["value"] for it in cfg if isinstance(it.get("value"), int) and matches(name, it)]
    return vals


def _joint(skills: list[dict], names: list[str], default: dict[str, int]) -> list[dict[str, int]]:
    """The skills' measured configurations as sweep points: each kernel's values for the swept axes
    (its first matching constant per axis), kept when they move two axes or more off the default
    (one axis moved is a steered one-axis point already)."""
    out = []
    for s in skills:
        for cfg in _measured(s):
            p = dict(default)
            for n in names:
                v = next((it["value"] for it in cfg if isinstance(it.get("value"), int) and matches(n, it)), None)
                if v is not None and v > 0:
                    p[n] = v
            if sum(p[n] != default[n] for n in names) >= 2 and p not in out:
                out.append(p)
    return out


def _neighbours(role: str | None, default: int) -> list[int]:
    if role == "block":
        return [v for v in (128, 256, 512, 64, 1024, 768) if v != default]
    if role == "tile":
        return [v for v in (default * 2, default // 2) if v >= 16 and v != default]
    if role == "warps":
        return [v for v in (default * 2, default // 2) if 1 <= v <= 32 and v != default]
    if role == "occupancy":
        return [v for v in (1, 2, 3, 4) if v != default]
    if role == "stages":  # a pipeline depth: one more and one fewer (at least 2: one in use, one in flight)
        return [v for v in (default + 1, default - 1) if v >= 2]
    return list(dict.fromkeys(v for v in (default * 2, default * 4, max(1, default // 2), max(1, default // 4),
                                          default * 8) if v != default))


def _values(tun: dict[str, int], name: str) -> list[int]:
    """An axis's values: its default, then its neighbours."""
    return list(dict.fromkeys([tun[name]] + _neighbours(_role(name), tun[name])))


def _axes(tun: dict[str, int], source: str = "", buildable: Buildable | None = None) -> list[str]:
    """The tunables a sweep varies: named ones with a role first, then file order; two, and more (up
    to MAX_AXES) while the grid of the axes so far holds fewer than MIN_GRID configurations. A pair
    of tile extents gives 3 x 3 = 9 points, which a budget of 12 random draws would enumerate; a
    search space the budget can exhaust cannot tell a steered search from a random one. With
    `buildable` (NvccFrontEnd), only the configurations the kernel's static checks accept count: the
    held-out attention kernel's 27 points over BLOCK_M, BLOCK_N and WARPS hold 12 it builds (a block
    is 1 or 2 16-row tiles per warp), so it sweeps ATTN_STAGES as well."""
    order = sorted(tun, key=lambda n: (_role(n) is None, list(tun).index(n)))
    names = order[:2]
    for n in order[2:MAX_AXES]:
        grid = [dict(zip(names, c)) for c in itertools.product(*(_values(tun, m) for m in names))]
        if len(grid) >= MIN_GRID and (buildable is None or sum(buildable(source, grid)) >= MIN_GRID):
            break
        names.append(n)
    return names


def sweep_order(source: str, skills: list[dict], buildable: Buildable | None = None) -> list[dict[str, int]]:
    """Every configuration the steered sweep can give the source's swept tunables (_axes), in the
    order it gates them; [] when the source exposes none. The default first; then the head that is
    a round's points: the cards' configurations (MAX_JOINT of them; with `buildable`, of those that
    build), one axis moved at a time with the steered values leading, and for two axes the pairs of
    each one's first two values; then the rest, by the number of axes moved and the values' ranks.
    Points are not checked here (next_points checks them as it takes them)."""
    tun = tunables(source)
    if not tun:
        return []
    names = _axes(tun, source, buildable)
    axes = {}
    for n in names:
        role = _role(n)
        vals = [v for v in _steered(skills, n) if v > 0] + _neighbours(role, tun[n])
        axes[n] = list(dict.fromkeys(v for v in vals if v != tun[n]))
    default = {n: tun[n] for n in names}
    joint = buildable_only(source, _joint(skills, names, default), buildable)
    points = [default] + joint[:MAX_JOINT]  # the cards' configurations first
    # one axis at a time first (the steered values lead), then pairs
    if len(names) <= 2:
        per_axis = MAX_SWEEP - 1 if len(names) == 1 else 3
        for n in names:
            for v in axes[n][:per_axis]:
                points.append({**default, n: v})
    else:  # three or more axes: each axis's first value, then each one's second, ...
        for rank in range(max(len(v) for v in axes.values())):
            points += [{**default, n: axes[n][rank]} for n in names if rank < len(axes[n])]
    if len(names) == 2:
        for a, b in itertools.product(axes[names[0]][:2], axes[names[1]][:2]):
            points.append({names[0]: a, names[1]: b})
    # the rest: the other cards' configurations, then every other combination of the axes' values
    points += joint[MAX_JOINT:]
    ranked = [[tun[n]] + axes[n] for n in names]
    rest = sorted(itertools.product(*(range(len(r)) for r in ranked)),
                  key=lambda ix: (sum(i > 0 for i in ix), sum(ix), ix))
    points += [{n: ranked[k][i] for k, (n, i) in enumerate(zip(names, ix))} for ix in rest]
    return list({tuple(sorted(p.items())): p for p in points}.values())


def next_points(source: str, order: list[dict[str, int]], n: int, buildable: Buildable | None = None,
                skip: Callable[[dict[str, int]], bool] | None = None) -> list[dict[str, int]]:
    """The first `n` points of `order` (the default, order[0], left out) that `skip` does not name
    and, with `buildable`, that the kernel builds: checked a few at a time, as many as it takes."""
    out: list[dict[str, int]] = []
    todo = [p for p in order[1:] if skip is None or not skip(p)]
    while todo and len(out) < n:
        take = max(2 * (n - len(out)), 4)  # twice what is still wanted: most points build
        chunk, todo = todo[:take], todo[take:]
        out += buildable_only(source, chunk, buildable)
    return out[:n]


def buildable_only(source: str, points: list[dict[str, int]], buildable: Buildable | None) -> list[dict[str, int]]:
    """The points the kernel builds, as `buildable` answers (all of them without one), in order."""
    if buildable is None or not points:
        return list(points)
    return [p for p, ok in zip(points, buildable(source, points)) if ok]


def sweep_points(source: str, skills: list[dict], buildable: Buildable | None = None) -> list[dict[str, int]]:
    """A round's 5-7 configurations from the start: the default, then the first points of
    sweep_order (with `buildable`, of those the kernel builds); [] when it exposes no tunables."""
    order = sweep_order(source, skills, buildable)
    return order[:1] + next_points(source, order, MAX_SWEEP - 1, buildable) if order else []


def sweep_space(source: str, buildable: Buildable | None = None) -> dict[str, list[int]]:
    """{axis: [default, neighbours...]}: the values the sweep can give its axes with no library."""
    tun = tunables(source)
    return {n: _values(tun, n) for n in _axes(tun, source, buildable)}


def sweep_grid(source: str, buildable: Buildable | None = None) -> list[dict[str, int]]:
    """Every point of sweep_space: the default first, then the others in product order; [] when the
    source has no tunables. `buildable` chooses the axes only: the grid keeps the points the kernel
    refuses (a random draw of one is recorded as refused and replaced)."""
    space = sweep_space(source, buildable)
    if not space:
        return []
    default = {k: v[0] for k, v in space.items()}
    return [default] + [p for p in (dict(zip(space, combo)) for combo in itertools.product(*space.values()))
                        if p != default]


def random_points(source: str, n: int, seed: int, buildable: Buildable | None = None) -> list[dict[str, int]]:
    """The default, then `n` distinct other points of sweep_space drawn uniformly at random: the first
    `n` of one seeded permutation of the space (random.Random(seed)), so a longer draw begins with a
    shorter one; fewer when the space is smaller; [] when the source has no tunables. (For the sizes
    of the held-out grids and n = 12 these are the points random.Random(seed).sample(others, 12) gave,
    which the recorded runs used.)"""
    grid = sweep_grid(source, buildable)
    if not grid:
        return []
    order = random.Random(seed).sample(grid[1:], len(grid) - 1)
    return grid[:1] + order[:max(n, 0)]


def point_flags(point: dict[str, int]) -> tuple[str, ...]:
    """The nvcc flags that give a kernel a sweep point's configuration (-DNAME=value, sorted)."""
    return tuple(f"-D{k}={v}" for k, v in sorted(point.items()))


class NvccFrontEnd:
    """Which sweep points of a kernel build, as nvcc's front end answers (klineage.gate.compile.
    front_end_accepts: the kernel's static_asserts and #errors). A point is asked in full (the
    kernel's tunables at their defaults with the point applied) of the kernel with its defaults
    zeroed, so a baked sweep winner and the flags that gave it are one question, answered once and
    cached on disk. Points are asked in parallel; one whose check ran past its limit counts as
    refused. Raises InputError when nvcc is missing."""

    def __init__(self, arch: str | None = None, jobs: int | None = None, cache_dir: Path | None = None):
        from klineage.gate.compile import DEFAULT_ARCH
        self.arch, self.cache_dir = arch or DEFAULT_ARCH, cache_dir
        self.jobs = jobs or max(1, os.cpu_count() or 1)

    def __call__(self, source: str, points: list[dict[str, int]]) -> list[bool]:
        from klineage.gate.compile import front_end_accepts
        tun = tunables(source)
        base = bake(source, {n: 0 for n in tun})
        asks = [point_flags({**tun, **p}) for p in points]
        with ThreadPoolExecutor(max_workers=min(self.jobs, max(1, len(asks)))) as pool:
            return [got is True for got in pool.map(lambda f: front_end_accepts(base, self.arch, f, self.cache_dir), asks)]


def check_sweep_axes(sweep_axes: str) -> None:
    """Raise ValueError unless `sweep_axes` is one of SWEEP_AXES."""
    if sweep_axes not in SWEEP_AXES:
        raise ValueError(f"sweep_axes {sweep_axes!r}: choose {' or '.join(SWEEP_AXES)}")


def make_buildable(sweep_axes: str, arch: str | None = None) -> Buildable | None:
    """The check a sweep_axes setting names: "source", none (every grid point counts); "buildable",
    NvccFrontEnd. Raises ValueError for anything else."""
    check_sweep_axes(sweep_axes)
    return NvccFrontEnd(arch) if sweep_axes == "buildable" else None


def steered_by(skills: list[dict], source: str, point: dict[str, int]) -> tuple[str, ...]:
    """The skills that steered this point: for each value it gives an axis off the default, the first
    skill in `skills` (retrieval's rank order) whose card names it. That skill's value is the one that
    put the value where it stands in the sweep's order; later cards naming a common value (512
    threads, say) only agree with it."""
    tun = tunables(source)
    names = set()
    for axis, v in point.items():
        if v != tun.get(axis):
            first = next((s["name"] for s in skills if v in _steered([s], axis)), None)
            if first is not None:
                names.add(first)
    return tuple(sorted(names))


class RulesMaterializer:
    """The mechanism's forward rewrite: its family's reoptimize; with `structural`, else a shape
    rewriter's (klineage.mechanisms.shapes)."""
    name = "rules"

    def __init__(self, structural: bool = False, arch: str | None = None):
        from klineage.gate.compile import DEFAULT_ARCH
        self.structural, self.arch = structural, arch or DEFAULT_ARCH

    def propose(self, skill: dict, kernel: str, wl: Workload, feedback: str | None = None) -> list[Candidate]:
        """The mechanism's forward rewrite (its family's reoptimize, else a shape rewriter's with the
        card's parameters); a skill without a card (the random control's) takes the rewriters' own."""
        card = _card(skill)
        requires = [] if card is None else [r[-1] for r in card.requires]
        got = rewrite_for(skill["mechanism"], kernel, requires, None, card=card, workload=wl,
                          structural=self.structural, arch=self.arch)
        if got is None:
            return []
        src, info = got
        return [Candidate(src, self.name, skill["skill_id"], skill["name"], config=info.get("config") or {},
                          note=f"{skill['mechanism']} rewrite at {info.get('locus')}")]

    def why_not(self, skill: dict) -> str:
        return f"no forward rewrite of {skill['mechanism']} applies to the current kernel"


class SweepMaterializer:
    """The steered sweep; with `buildable` (NvccFrontEnd), its axes count and its points hold only
    configurations the kernel's static checks accept."""
    name = "sweep"

    def __init__(self, buildable: Buildable | None = None):
        self.buildable = buildable

    def propose_all(self, skills: list[dict], kernel: str, wl: Workload,
                    skip: Callable[[dict[str, int]], bool] | None = None, n: int = MAX_SWEEP - 1) -> list[Candidate]:
        """The next `n` points of sweep_order (the default, the kernel itself, left out) that `skip`
        does not name (the configurations already gated), fewer when the order runs out."""
        order = sweep_order(kernel, skills, self.buildable)
        if len(order) < 2:
            return []
        steer = sorted({s["name"] for s in skills})
        out = []
        for p in next_points(kernel, order, n, self.buildable, skip):
            out.append(Candidate(kernel, self.name, None, None, flags=point_flags(p), config=dict(p),
                                 note=f"sweep point {p} (steered by {len(steer)} skills)",
                                 steered_by=steered_by(skills, kernel, p)))
        return out

    def why_not(self, kernel: str) -> str:
        return ("the kernel exposes no tunable constants (#ifndef NAME / #define NAME <int> / #endif)"
                if not tunables(kernel) else "fewer than two sweep points")


class RandomSweepMaterializer(SweepMaterializer):
    """A control: configurations drawn at random (seeded) from sweep_space, the library unused. It
    proposes the whole space in its random order, and the apply loop gates them until its budget_steps
    are spent: with budget_steps = `points` (as the held-out check sets them), the first `points`
    draws, and past them only as many as replace draws nvcc refused (klineage.apply.loop.spends_budget).
    `points` stays in the spec, and so in run ids."""

    def __init__(self, points: int, seed: int, buildable: Buildable | None = None):
        super().__init__(buildable)
        self.points, self.seed = points, seed

    def propose_all(self, skills: list[dict], kernel: str, wl: Workload,
                    skip: Callable[[dict[str, int]], bool] | None = None, n: int | None = None) -> list[Candidate]:
        """The whole permutation at once (the loop's budget cuts it); `skip` and `n` are not used."""
        out = []
        b = self.buildable
        for p in random_points(kernel, len(sweep_grid(kernel, b)), self.seed, b)[1:]:
            out.append(Candidate(kernel, self.name, None, None, flags=point_flags(p), config=dict(p),
                                 note=f"random point {p} (seed {self.seed}, no library)"))
        return out


def make_sweep(spec: dict | None, buildable: Buildable | None = None) -> SweepMaterializer:
    """The sweep backend an ApplyConfig.sweep names: None, steered by the skills; {"mode": "random",
    "points": N, "seed": S}, the random control. Raises ValueError for anything else."""
    if spec is None:
        return SweepMaterializer(buildable)
    if spec.get("mode") == "random" and set(spec) == {"mode", "points", "seed"}:
        return RandomSweepMaterializer(int(spec["points"]), int(spec["seed"]), buildable)
    raise ValueError(f"unknown sweep {spec!r}: None (steered) or {{'mode': 'random', 'points': N, 'seed': S}}")


class LLMBackendMaterializer:
    """Adapter from klineage.apply.llm.LLMMaterializer to Candidates (one card per call)."""
    name = "llm"

    def __init__(self, llm):
        self.llm = llm

    def propose(self, skill: dict, kernel: str, wl: Workload, feedback: str | None = None) -> list[Candidate]:
        from dataclasses import asdict
        ex = self.llm.propose([skill["card_md"]], kernel, contract_text(wl), feedback)
        rec = asdict(ex)
        if ex.kernel is None:
            return [Candidate("", self.name, skill["skill_id"], skill["name"], note=f"no kernel: {ex.error}", exchange=rec)]
        return [Candidate(ex.kernel, self.name, skill["skill_id"], skill["name"], note="llm rewrite", exchange=rec)]

    def why_not(self, skill: dict) -> str:
        return "the model gave no kernel"


def contract_text(wl: Workload) -> str:
    """What a model needs of the workload: the entry point's C signature, the workload file and the
    corpus modules it imports (its oracle, inputs and tolerance may live there)."""
    from klineage.workload import shared_modules
    path = Path(wl.path)
    text = f"Entry point (keep exactly): {wl.c_signature}\n\nworkload.py:\n" + path.read_text()
    for f in shared_modules(path):
        text += f"\n\n{f.relative_to(path.parent.parent).as_posix()} (imported by workload.py):\n" + f.read_text()
    return text


REGISTRY = {"rules": RulesMaterializer, "sweep": SweepMaterializer, "llm": LLMBackendMaterializer}
