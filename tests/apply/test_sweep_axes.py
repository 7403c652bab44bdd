"""sweep_axes = "buildable": the sweep counts only the configurations a kernel builds when it picks
its axes (nvcc's front end answers, klineage.gate.compile.front_end_accepts), and the steered sweep
proposes only those. A fake check stands in for nvcc where the rule is under test; the tests marked
nvcc ask the real front end about the held-out attention kernel."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from klineage.apply.loop import ApplyConfig, apply
from klineage.apply.materialize import (MIN_GRID, NvccFrontEnd, _axes, bake, make_buildable, make_sweep, point_flags,
                                        random_points, sweep_grid, sweep_points, sweep_space, tunables)
from klineage.errors import InputError
from klineage.gate import compile as compile_mod
from klineage.heldout.run import HeldoutConfig
from klineage.pipelines import PipelineError, load_pipeline
from klineage.workload import load_workload

from tests.apply.test_apply_loop import RefusingGate
from tests.support.cards import case, skill_card

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "heldout" / "kernels"
SHIPPED = ROOT / "skills_db" / "skills.duckdb"


class Fake:
    """A stand-in for NvccFrontEnd: a point builds when `rule(full configuration)` holds; it keeps
    every question asked."""

    def __init__(self, rule):
        self.rule, self.asked = rule, []

    def __call__(self, source, points):
        tun = tunables(source)
        self.asked += [dict(p) for p in points]
        return [bool(self.rule({**tun, **p})) for p in points]


def attention_rule(c):
    """The attention kernel's static checks on a block's shape: 1 or 2 16-row tiles per warp."""
    tiles, rem = divmod(c["ATTN_BLOCK_M"], 16 * c["ATTN_WARPS"])
    return rem == 0 and tiles in (1, 2)


def test_a_grid_the_kernel_mostly_refuses_gets_another_axis():
    """The attention kernel's 27 points over BLOCK_M, BLOCK_N and WARPS hold fewer it builds than
    MIN_GRID, so ATTN_STAGES joins. Counting every point (the source rule) it stops at 27; a check
    that accepts everything gives the source rule's axes."""
    src = (KERNELS / "attn_idiom.cu").read_text()
    assert list(sweep_space(src)) == ["ATTN_BLOCK_M", "ATTN_BLOCK_N", "ATTN_WARPS"]
    check = Fake(attention_rule)
    space = sweep_space(src, check)
    assert list(space) == ["ATTN_BLOCK_M", "ATTN_BLOCK_N", "ATTN_WARPS", "ATTN_STAGES"]
    assert space["ATTN_STAGES"] == [3, 4, 2]
    three = [p for p in check.asked if len(p) == 3]
    # the rule alone leaves 15 of the 27 (the real kernel's register budget refuses 3 more: 12)
    assert len(three) == 27 and sum(map(attention_rule, ({**tunables(src), **p} for p in three))) == 15 < MIN_GRID
    assert not [p for p in check.asked if len(p) == 2]  # 9 points are under MIN_GRID: nothing to ask
    assert sweep_space(src, Fake(lambda c: True)) == sweep_space(src)
    # the grid keeps the points it refuses (a random draw of one is recorded and replaced)
    assert len(sweep_grid(src, check)) == 81
    assert random_points(src, 12, 5, check)[1:] == random_points(src, 80, 5, check)[1:13]


def test_the_check_is_asked_only_where_the_whole_grid_would_suffice():
    """A reduction's 36 THREADS x ITEMS points reach MIN_GRID: the check is asked once about them,
    and with every one built, VEC stays at its default as under the source rule."""
    src = (KERNELS / "rmsnorm_idiom.cu").read_text()
    check = Fake(lambda c: True)
    assert list(sweep_space(src, check)) == ["RMSNORM_THREADS", "RMSNORM_ITEMS"]
    assert len(check.asked) == 36
    # refuse enough of them and VEC joins
    assert list(sweep_space(src, Fake(lambda c: c["RMSNORM_ITEMS"] <= 2))) == ["RMSNORM_THREADS", "RMSNORM_ITEMS",
                                                                               "RMSNORM_VEC"]


def test_the_steered_sweep_proposes_only_points_that_build():
    """Refused one-axis moves and refused card configurations are left out before the cut to 7; the
    default stays first; the next buildable card configuration takes a refused one's place."""
    src = (KERNELS / "attn_idiom.cu").read_text()
    check = Fake(attention_rule)
    card = lambda name, values: {"skill_id": name, "name": name, "card": skill_card(  # noqa: E731
        name, "register_tiling", [case("w", {"n": 1024}, 1.2)], measured=[{"workload": "w", "kernel": "0" * 12, "values": [
            {"name": k, "value": v, "role": r, **({"axis": a} if a else {})} for k, v, r, a in values]}])}
    refused_card = card("big", [("BLOCK_M", 256, "tile", "M"), ("BLOCK_N", 64, "tile", "N")])
    built_card = card("small", [("BLOCK_M", 64, "tile", "M"), ("BLOCK_N", 64, "tile", "N")])
    pts = sweep_points(src, [refused_card, built_card], check)
    assert pts[0] == {"ATTN_BLOCK_M": 128, "ATTN_BLOCK_N": 32, "ATTN_WARPS": 4, "ATTN_STAGES": 3}
    assert all(attention_rule(p) for p in pts)
    assert pts[1] == {"ATTN_BLOCK_M": 64, "ATTN_BLOCK_N": 64, "ATTN_WARPS": 4, "ATTN_STAGES": 3}
    unchecked = sweep_points(src, [refused_card, built_card])
    assert any(not attention_rule(p) for p in unchecked)
    assert make_sweep(None, check).buildable is check and make_sweep(
        {"mode": "random", "points": 4, "seed": 1}, check).buildable is check


def test_sweep_axes_is_a_setting_left_out_of_run_ids_at_its_default(tmp_path):
    assert "sweep_axes" not in ApplyConfig().to_dict() and "sweep_axes" not in HeldoutConfig().to_dict()
    assert ApplyConfig(sweep_axes="buildable").to_dict()["sweep_axes"] == "buildable"
    assert HeldoutConfig(sweep_axes="buildable").to_dict()["sweep_axes"] == "buildable"
    for make in (ApplyConfig, HeldoutConfig):
        with pytest.raises(ValueError, match="source or buildable"):
            make(sweep_axes="compiled")
    with pytest.raises(ValueError, match="source or buildable"):
        make_buildable("compiled")
    assert make_buildable("source") is None and isinstance(make_buildable("buildable", "sm_90a"), NvccFrontEnd)
    assert load_pipeline(ROOT / "pipelines" / "heldout.toml").run.config.sweep_axes == "buildable"
    (tmp_path / "pipelines").mkdir()
    p = tmp_path / "pipelines" / "h.toml"
    p.write_text('kind = "heldout"\n[heldout]\nsweep_axes = "compiled"\n')
    with pytest.raises(PipelineError, match="sweep_axes 'compiled': choose source or buildable"):
        load_pipeline(p)


def test_the_apply_loop_asks_its_gates_arch_and_gates_no_refused_point(tmp_path, monkeypatch):
    """With sweep_axes = "buildable" the loop builds its check for the gate's arch, and the steered
    sweep gates no point the check refuses (the same ones RefusingGate's nvcc refuses)."""
    from klineage.apply import loop as loop_mod
    from klineage.store import open_store
    asked = []

    def fake_make(axes, arch=None):
        asked.append((axes, arch))
        return Fake(lambda c: c["GELU_ITEMS"] not in (16, 32)) if axes == "buildable" else None
    monkeypatch.setattr(loop_mod, "make_buildable", fake_make)
    db = tmp_path / "lib.duckdb"
    shutil.copy(SHIPPED, db)
    store = open_store(db)
    try:
        d = ROOT / "apply_workloads" / "gelu"
        start = (d / "naive.cu").read_text().replace(
            "#ifndef GELU_BLOCK", "#ifndef GELU_ITEMS\n#define GELU_ITEMS 4\n#endif\n#ifndef GELU_BLOCK", 1)
        gate = RefusingGate(store=store)
        run = apply(store, gate, load_workload(d), start, "gelu+items",
                    ApplyConfig(materializers=("sweep",), budget_steps=12, sweep_rounds=3, sweep_axes="buildable"))
        sweeps = [s for s in run["steps"] if s["backend"] == "sweep"]
        assert sweeps and all(s["status"] != "COMPILE_ERROR" for s in sweeps)
        assert asked == [("buildable", gate.config.arch)]
        plain = apply(store, RefusingGate(store=store), load_workload(d), start, "gelu+items",
                      ApplyConfig(materializers=("sweep",), budget_steps=12, sweep_rounds=3))
        assert any(s["status"] == "COMPILE_ERROR" for s in plain["steps"] if s["backend"] == "sweep")
    finally:
        store.close()


def test_the_front_end_check_needs_nvcc_and_caches_no_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(compile_mod, "nvcc_version", lambda nvcc="nvcc": "")
    with pytest.raises(InputError, match="install the CUDA toolkit"):
        compile_mod.front_end_accepts("__global__ void k() {}\n", cache_dir=tmp_path)
    monkeypatch.setattr(compile_mod, "nvcc_version", lambda nvcc="nvcc": "13.0, V13.0.88")
    monkeypatch.setattr(compile_mod, "_run_nvcc", lambda *a, **k: (None, ""))
    assert compile_mod.front_end_accepts("__global__ void k() {}\n", cache_dir=tmp_path) is None
    assert not any(p.is_file() for p in (tmp_path / "front_end").rglob("*"))  # an unknown answer is not kept
    check = NvccFrontEnd(cache_dir=tmp_path)
    assert check((KERNELS / "attn_idiom.cu").read_text(), [{"ATTN_WARPS": 8}]) == [False]  # unknown counts as refused


@pytest.mark.nvcc
def test_nvcc_front_end_reads_the_attention_kernels_static_checks(tmp_path, monkeypatch):
    """The real front end: 12 of the 27 BLOCK_M x BLOCK_N x WARPS points build, so the held-out
    attention kernel sweeps ATTN_STAGES too. A baked sweep winner and the flags that gave it are one
    question: asked again of the baked kernel, it runs no nvcc."""
    src = (KERNELS / "attn_idiom.cu").read_text()
    check = NvccFrontEnd(cache_dir=tmp_path)
    assert check(src, [{}, {"ATTN_BLOCK_M": 256, "ATTN_WARPS": 4}, {"ATTN_BLOCK_M": 256, "ATTN_WARPS": 8}]) == [
        True, False, True]
    assert list(_axes(tunables(src), src, check)) == ["ATTN_BLOCK_M", "ATTN_BLOCK_N", "ATTN_WARPS", "ATTN_STAGES"]
    runs = []
    real = compile_mod._run_nvcc
    monkeypatch.setattr(compile_mod, "_run_nvcc", lambda *a, **k: runs.append(a) or real(*a, **k))
    baked = bake(src, {"ATTN_WARPS": 8, "ATTN_BLOCK_M": 256})
    assert check(baked, [{"ATTN_WARPS": 4}, {}]) == [False, True] and runs == []
    # the answers agree with the full build's on a refused and a built point
    refused = compile_mod.compile_kernel(src, extra_flags=point_flags({"ATTN_BLOCK_M": 256, "ATTN_WARPS": 4}),
                                         cache_dir=tmp_path / "b")
    assert not refused.ok and refused.error_kind == "nvcc_error"


def test_a_round_fills_its_places_from_further_down_the_order_asking_only_what_it_takes():
    """Where the head of the sweep order holds fewer than 6 points the kernel builds, the round takes
    the next buildable ones from further down; the check is asked a few points at a time, not about
    the whole grid."""
    from klineage.apply.materialize import MAX_SWEEP, next_points, sweep_order
    src = (KERNELS / "attn_idiom.cu").read_text()
    check = Fake(attention_rule)
    sweep_space(src, check)  # the axes' own questions
    check.asked.clear()
    order = sweep_order(src, [], check)
    pts = sweep_points(src, [], check)
    assert len(pts) == MAX_SWEEP and all(attention_rule(p) for p in pts)
    assert len(check.asked) < len(order) - 1 == 80
    head = [p for p in order[1:MAX_SWEEP] if attention_rule(p)]
    assert pts[1:1 + len(head)] == head and len(head) < MAX_SWEEP - 1  # refused head points, filled from below
    seen = {tuple(sorted(p.items())) for p in pts}
    after = next_points(src, order, 6, check, skip=lambda p: tuple(sorted(p.items())) in seen)
    assert len(after) == 6 and not {tuple(sorted(p.items())) for p in after} & seen
    assert [p for p in order if p in after] == after  # in the order's order


def test_recorded_answers_come_first_where_they_are_this_nvccs_or_in_a_replay(tmp_path, monkeypatch):
    """export/load of front-end answers: another nvcc version's answers are left out of a live run and
    taken in a replay (they are what the recorded run saw); a failure that names no error in the
    kernel (the machine's, not the kernel's) is no answer and is not cached; a damaged record is a
    clear error."""
    monkeypatch.setattr(compile_mod, "_FE_RECORDED", {})
    monkeypatch.setattr(compile_mod, "_FE_SEEN", {})
    monkeypatch.setattr(compile_mod, "nvcc_version", lambda nvcc="nvcc": "13.0, V13.0.88")
    src = "__global__ void k() {}\n"
    monkeypatch.setattr(compile_mod, "_run_nvcc", lambda *a, **k: (1, "nvcc fatal   : Could not open output file"))
    assert compile_mod.front_end_accepts(src, cache_dir=tmp_path) is None
    assert not any(p.is_file() for p in (tmp_path / "front_end").rglob("*"))
    monkeypatch.setattr(compile_mod, "_run_nvcc", lambda *a, **k: (2, "kernel.cu(1): error: expected a \";\""))
    assert compile_mod.front_end_accepts(src, cache_dir=tmp_path) is False
    rec = tmp_path / ("run" + compile_mod.FRONT_END_SUFFIX)
    assert compile_mod.export_front_end_answers(rec) == 1
    monkeypatch.setattr(compile_mod, "nvcc_version", lambda nvcc="nvcc": "12.4, V12.4.131")
    assert compile_mod.load_front_end_answers(rec) == 0 and not compile_mod._FE_RECORDED
    assert compile_mod.load_front_end_answers(rec, replay=True) == 1
    monkeypatch.setattr(compile_mod, "_run_nvcc", lambda *a, **k: (0, ""))  # this nvcc would accept it
    assert compile_mod.front_end_accepts(src, cache_dir=tmp_path / "other") is False  # the record answers
    bad = tmp_path / ("bad" + compile_mod.FRONT_END_SUFFIX)
    bad.write_bytes(b"not gzip")
    with pytest.raises(InputError, match="not a front-end answer record"):
        compile_mod.load_front_end_answers(bad)
