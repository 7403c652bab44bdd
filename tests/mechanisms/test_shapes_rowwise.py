"""Row-wise shape rewriter: recognition, each structural rewrite on the held-out and corpus start
kernels of its shape (compiled with nvcc, audited to add exactly its mechanism), composition, the
card's parameters, and the reasons it gives where it does not apply."""
from pathlib import Path

import pytest

from klineage.mechanisms import forward
from klineage.mechanisms.audit import audit_structural
from klineage.mechanisms import NotApplicable, detect_all, registry
from klineage.mechanisms.shapes import forward_states, shape_mechanisms, structural_rewrite
from klineage.mechanisms.shapes import rowwise as R
from klineage.tuning import configuration

ROOT = Path(__file__).resolve().parents[2]
HELD = ROOT / "heldout" / "kernels"
NAIVE = {
    "softmax": HELD / "softmax_naive.cu", "rmsnorm": HELD / "rmsnorm_naive.cu",
    "layernorm": HELD / "layernorm_naive.cu", "add_rmsnorm": HELD / "add_rmsnorm_naive.cu",
    "row_sum": ROOT / "expert_kernels/row_sum/naive.cu", "cross_entropy": ROOT / "expert_kernels/cross_entropy/naive.cu",
    "cross_entropy_bf16": ROOT / "expert_kernels/cross_entropy_bf16/naive.cu",
}
KNOWN = {m.NAME for m in registry().values() if m.DETECTABLE}


def src(name: str) -> str:
    return NAIVE[name].read_text()


def add(source: str, *mechs: str, config: dict | None = None) -> str:
    for m in mechs:
        source, _ = R.add(source, m, config or {})
    return source


def audited(before: str, after: str, mech: str) -> dict:
    return audit_structural(detect_all(before), detect_all(after), mech, KNOWN, shape_mechanisms(before),
                            shape_mechanisms(after))


def check(before: str, mech: str, compiles, config: dict | None = None) -> str:
    """`mech` added to `before` through the registry's structural_rewrite: compiled, audited."""
    res = structural_rewrite(mech, before, config or {})
    assert not isinstance(res, NotApplicable), res.reason
    au = audited(before, res.source, mech)
    assert au["ok"], au["reason"]
    assert mech in shape_mechanisms(res.source) and mech not in shape_mechanisms(before)
    compiles(res.source)
    return res.source


# ---------------------------------------------------------------- recognition

@pytest.mark.parametrize("name", sorted(NAIVE))
def test_the_naive_kernels_are_rows_of_one_thread(name):
    shape = R.RowwiseRewriter().recognise(src(name))
    assert not isinstance(shape, NotApplicable), shape
    assert shape.facts["granularity"] == "thread" and shape.facts["mechanisms"] == []
    assert "sum" in shape.facts["ops"] or "max" in shape.facts["ops"]


@pytest.mark.parametrize("path", ["expert_kernels/row_sum/versions/01_restrict.cu",
                                  "expert_kernels/row_sum/versions/03_launch_bounds.cu",
                                  "expert_kernels/cross_entropy/versions/01_restrict.cu"])
def test_ladder_rungs_before_the_row_is_shared_are_recognised(path):
    shape = R.RowwiseRewriter().recognise((ROOT / path).read_text())
    assert not isinstance(shape, NotApplicable) and shape.facts["granularity"] == "thread"


@pytest.mark.parametrize("path, why", [
    ("heldout/kernels/rmsnorm_idiom.cu", "no row index"),
    ("expert_kernels/row_sum/versions/04_warp_per_row.cu", "no row index"),
    ("apply_workloads/gelu/naive.cu", "no pass over the row"),
    ("expert_kernels/cumsum/naive.cu", "is not a pass over the row"),   # a scan: each column reads the last
    ("expert_kernels/gemm/naive.cu", "tests more than the row index"),   # a grid of outputs
    ("expert_kernels/conv2d/naive.cu", "is not a pass over the row"),     # a window nest with `continue`
])
def test_other_kernels_are_not_applicable_with_the_reason(path, why):
    got = R.RowwiseRewriter().recognise((ROOT / path).read_text())
    assert isinstance(got, NotApplicable) and why in got.reason


# ---------------------------------------------------------------- each rewrite, on three or more kernels

@pytest.mark.parametrize("name", ["softmax", "rmsnorm", "add_rmsnorm", "row_sum", "cross_entropy"])
def test_block_per_row(name, compiles):
    out = check(src(name), "block_per_row", compiles)
    assert "int r = blockIdx.x;" in out or "int b = blockIdx.x;" in out
    assert "c += kl_n" in out and "kl_row_" in out


@pytest.mark.parametrize("name", ["softmax", "layernorm", "row_sum", "cross_entropy_bf16"])
def test_warp_per_row(name, compiles):
    out = check(src(name), "warp_per_row", compiles)
    assert "/ 32;" in out and "kl_t = threadIdx.x % 32" in out and "__syncwarp" in out


@pytest.mark.parametrize("name, first", [("rmsnorm", "block_per_row"), ("layernorm", "warp_per_row"),
                                         ("softmax", "block_per_row"), ("row_sum", "warp_per_row")])
def test_warp_reduction(name, first, compiles):
    base = add(src(name), first)
    out = check(base, "warp_reduction", compiles)
    new = {f.key for f in detect_all(out)} - {f.key for f in detect_all(base)}
    assert new and all(m == "warp_reduction" for m, _ in new)
    assert "__shfl_xor_sync(0xffffffffu, v, o)" in out and "kl_tree" not in out  # no shared-memory tree left


@pytest.mark.parametrize("name, first", [("softmax", None), ("cross_entropy", None),
                                         ("softmax", "block_per_row"), ("cross_entropy_bf16", "warp_per_row")])
def test_online_softmax(name, first, compiles):
    base = add(src(name), first) if first else src(name)
    out = check(base, "online_softmax", compiles)
    assert out.count("for (int c =") == base.count("for (int c =") - 1  # two passes became one


@pytest.mark.parametrize("name, first, anchor", [("rmsnorm", "block_per_row", "global load"),
                                                 ("layernorm", "warp_per_row", "global load"),
                                                 ("add_rmsnorm", "block_per_row", "global store"),
                                                 ("softmax", "block_per_row", "")])
def test_vector_access(name, first, anchor, compiles):
    base = add(src(name), first)
    out = check(base, "vector_access", compiles, {"anchor": anchor})
    assert "kl_nv" in out and "% 16 == 0" in out  # a misaligned row goes element by element
    added = [f for f in detect_all(out) if f.mechanism == "vector_access"]
    kinds = {f.locus.split(":")[1] for f in added}
    assert kinds == ({"store"} if "store" in anchor else {"load"} if "load" in anchor else {"load", "store"})


@pytest.mark.parametrize("name, chain", [("rmsnorm", ("warp_per_row",)), ("layernorm", ("block_per_row",)),
                                         ("softmax", ("block_per_row", "online_softmax")),
                                         ("softmax", ("warp_per_row", "vector_access"))])
def test_register_cache(name, chain, compiles):
    base = add(src(name), *chain)
    out = check(base, "register_cache", compiles)
    assert "_CACHE_ITEMS" in out and "kl_rc0[kl_i]" in out
    assert "#pragma unroll" not in out  # nvcc unrolls the constant-trip loops itself (no unroll mechanism added)


def test_the_register_cache_stays_in_registers():
    """ptxas: the cached row of a vectorized, cached softmax takes no stack frame (the loops over the
    cache are unrolled, their indices constants)."""
    from klineage.gate.compile import compile_kernel
    out = add(src("softmax"), "block_per_row", "warp_reduction", "online_softmax", "vector_access", "register_cache")
    res = compile_kernel(out)
    assert res.ok, res.log[-2000:]
    assert "0 bytes stack frame" in res.log, res.log[-2000:]


# ---------------------------------------------------------------- composition, parameters, reasons

def test_the_order_of_decorations_and_fusions_does_not_matter():
    a = add(src("softmax"), "block_per_row", "online_softmax", "vector_access", "register_cache", "warp_reduction")
    b = add(src("softmax"), "block_per_row", "vector_access", "warp_reduction", "register_cache", "online_softmax")
    assert a == b
    assert shape_mechanisms(a) == {"block_per_row", "online_softmax", "vector_access", "register_cache",
                                   "warp_reduction"}


def test_the_card_chooses_threads_and_cache_units():
    card = {"anchor": "kernel structure", "measured": [
        {"workload": "cross_entropy", "values": [{"name": "CE_BLOCK", "role": "block", "value": 512},
                                                  {"name": "CE_UNROLL", "role": "factor", "value": 2}]},
        {"workload": "row_sum", "values": [{"name": "ROW_SUM_WARP_BLOCK", "role": "block", "value": 256},
                                            {"name": "ROW_SUM_BLOCK", "role": "block", "value": 512}]}]}
    out, chosen = R.add(src("rmsnorm"), "block_per_row", card)
    assert chosen["threads"] == 512
    cfg = {c["name"]: c["value"] for c in configuration(out)}
    assert cfg["RMSNORM_BLOCK"] == 512
    out, chosen = R.add(src("row_sum"), "warp_per_row", card)
    assert chosen["threads"] == 256 and "#define ROW_SUM_ROW_THREADS 256" in out
    out, chosen = R.add(add(src("rmsnorm"), "warp_per_row"), "register_cache", card)
    assert chosen["items"] == 2 and "#define RMSNORM_CACHE_ITEMS 2" in out
    # launch bounds cap the block: row_sum's rung 03 is launched with at most 256 threads
    rung = (ROOT / "expert_kernels/row_sum/versions/03_launch_bounds.cu").read_text()
    out, chosen = R.add(rung, "block_per_row", card)
    assert chosen["threads"] == 256 and "<= 256" in out


def test_cache_units_come_from_the_cards_factor():
    base = add(src("rmsnorm"), "block_per_row")
    out, chosen = R.add(base, "register_cache", {"measured": [{"values": [{"name": "CE_UNROLL", "role": "factor",
                                                                             "value": 8}]}]})
    assert chosen["items"] == 8 and "#define RMSNORM_CACHE_ITEMS 8" in out


@pytest.mark.parametrize("name, chain, mech, why", [
    ("rmsnorm", (), "online_softmax", "no pass taking the row's max"),
    ("rmsnorm", (), "vector_access", "one thread per row: share the row"),
    ("rmsnorm", (), "warp_reduction", "nothing to combine across threads"),
    ("add_rmsnorm", ("block_per_row",), "register_cache", "no row that two passes read"),
    ("cross_entropy", ("warp_per_row",), "register_cache", "declared between the cached passes and used after"),
    ("softmax", ("block_per_row",), "warp_per_row", "already"),
    ("softmax", ("block_per_row",), "block_per_row", "has block_per_row already"),
    ("softmax", ("warp_per_row", "warp_reduction"), "warp_reduction", "already"),
    ("row_sum", ("block_per_row",), "vector_access", None),  # applies (a load at base + c)
    ("softmax", ("online_softmax",), "online_softmax", "already"),
])
def test_not_applicable_reasons(name, chain, mech, why):
    base = add(src(name), *chain)
    res = structural_rewrite(mech, base, {})
    if why is None:
        assert not isinstance(res, NotApplicable)
    else:
        assert isinstance(res, NotApplicable) and why in res.reason, getattr(res, "reason", res)


def test_a_decorated_kernel_edited_by_hand_is_left_alone():
    out = add(src("softmax"), "block_per_row", "vector_access")
    edited = out.replace("for (int kl_l = 0; kl_l < 8; ++kl_l) {", "for (int kl_l = 0; kl_l < 8; kl_l++) {", 1)
    got = structural_rewrite("register_cache", edited, {})
    assert isinstance(got, NotApplicable) and "does not read back" in got.reason


def test_forward_states_follow_the_ladder():
    states = forward_states(src("softmax"))
    assert [m for _, m in states][-1] == ["block_per_row", "warp_reduction", "online_softmax", "vector_access",
                                          "register_cache"]
    assert [m for _, m in forward_states(src("rmsnorm"), skip="block_per_row")] == []


def test_admission_rewrite_audits_the_structural_path():
    base = add(src("layernorm"), "block_per_row")
    got = forward.rewrite_for("warp_reduction", base, [])
    assert got is not None and got[1]["audit"] == "structural" and got[1]["added"]
    assert all(a[0] == "warp_reduction" for a in got[1]["added"])
    got = forward.rewrite_for("block_per_row", src("layernorm"), [])
    assert got is not None and got[1]["added"] == []  # no detector sees it; the recogniser does
    assert forward.rewrite_for("register_cache", add(src("softmax"), "block_per_row"), ["online_softmax"]) is None


@pytest.mark.parametrize("edit, why", [
    (("float sum = 0.0f;", "float sum = 1.0f;"), "starts from '1.0f', not 0"),
    (("float sum = 0.0f;", "float sum = 0.0f;\n    sum += x[0];"), "written between its declaration and its pass"),
    (("    out[r] = sum;", "    for (int c = 0; c < cols; ++c) sum += x[(long long)r * cols + c];\n    out[r] = sum;"),
     "reduced by two passes"),
    (("sum += x[(long long)r * cols + c];", "{ sum += x[(long long)r * cols + c]; out[c + 1] = sum; }"),
     "is not a pass over the row"),
])
def test_a_row_loop_whose_threads_would_not_compute_the_same_is_refused(edit, why):
    """Sharing a row changes who computes what: a sum that does not start at zero, an accumulator
    reduced twice, a column writing what another reads: each refused with its reason."""
    got = R.RowwiseRewriter().recognise(src("row_sum").replace(*edit))
    assert isinstance(got, NotApplicable) and why in got.reason, getattr(got, "reason", got)
