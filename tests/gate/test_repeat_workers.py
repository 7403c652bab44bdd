"""Which worker process a gate's evaluation runs in: gates made by with_config share their lender's
worker group (its worker started by whichever asks first), and a repeat round has one worker of its own, never the
search's, shared by every repeat of that round."""
from __future__ import annotations

from dataclasses import replace

import pytest

import klineage.gate.pool as pool
from klineage.gate.gate import Gate, GateConfig


class CountingWorker:
    """Stands in for GateWorker: counts its evaluations and whether it was closed."""

    made: list["CountingWorker"] = []

    def __init__(self, *a, **kw):
        self.calls, self.closed = 0, False
        CountingWorker.made.append(self)

    def close(self):
        self.closed = True


@pytest.fixture
def workers(monkeypatch):
    CountingWorker.made = []
    monkeypatch.setattr(pool, "GateWorker", CountingWorker)
    monkeypatch.setattr(pool, "gpu_available", lambda: True)
    return CountingWorker.made


def _flags(g: Gate, *flags: str) -> Gate:
    return g.with_config(replace(g.config, extra_flags=tuple(flags)))


def _worker(g: Gate):
    """The worker process the gate's live evaluations run in (its serial executor's, of its group)."""
    return g.executor.worker(g.group)


def test_a_borrower_that_asks_first_starts_its_lenders_worker(workers):
    root = Gate(None, GateConfig())
    a, b = _flags(root, "-DX=1"), _flags(root, "-DX=2")
    w = _worker(a)  # the root has not asked yet
    assert _worker(b) is w and _worker(root) is w and _worker(_flags(a, "-DY=3")) is w
    assert len(workers) == 1
    a.close()  # a borrower leaves the worker to its lender
    assert not w.closed
    root.close()
    assert w.closed


def test_each_repeat_round_has_one_worker_of_its_own(workers):
    root = Gate(None, GateConfig())
    main = _worker(root)
    r2 = root.repeat(2)
    assert r2 is root.repeat(2) and r2.config.round == 2 and root.repeat(3).config.round == 3
    w2 = _worker(_flags(r2, "-DX=1"))
    assert w2 is not main
    # every later repeat of round 2, with any flags, runs in that same process
    assert _worker(_flags(root.repeat(2), "-DX=2")) is w2 and _worker(r2) is w2
    w3 = _worker(root.repeat(3))
    assert len({id(main), id(w2), id(w3)}) == 3 and len(workers) == 3
    with pytest.raises(ValueError, match="round 2 or later"):
        root.repeat(1)
    root.close()
    assert all(w.closed for w in workers)
