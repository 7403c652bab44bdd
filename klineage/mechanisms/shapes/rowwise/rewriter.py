"""The row-wise shape rewriter: read a kernel, add one mechanism, render it (see the package docstring)."""
from __future__ import annotations

from dataclasses import replace

from klineage.mechanisms.base import Applied, Kernel, NotApplicable
from klineage.mechanisms.shapes.base import Shape, ShapeRewriter, register
from klineage.mechanisms.shapes.rowwise.decorate import Deco, _items_name, render, undecorate
from klineage.mechanisms.shapes.rowwise.edits import _threads, to_granularity, to_online, to_shuffle
from klineage.mechanisms.shapes.rowwise.model import (_NA, BLOCK, CACHE, DEFAULT_ITEMS, MECHANISMS, ONLINE, SHUFFLE,
                                                      VECTOR, WARP, Row)
from klineage.mechanisms.shapes.rowwise.read import _kernels, read_row
from klineage.parse import syntax

# ---------------------------------------------------------------- reading a kernel, applying a mechanism

def analyse(source: str) -> tuple[Row, Deco, int | None]:
    """(the scalar form, its decorations, the cache constant's value) of a row kernel; raises _NA
    with the reason when the source is none, or when its decorations do not read back to it exactly."""
    scalar, deco, items = undecorate(source)
    row = read_row(scalar)
    if deco.vector or deco.items:
        again = render(row, deco, items)
        if again != source:
            raise _NA("the kernel's vector or register-cache form was changed after this rewriter wrote it: it "
                      "does not read back")
    return row, deco, items


def present(row: Row, deco: Deco) -> set[str]:
    """The mechanisms of this family the kernel has, as this module reads them."""
    out = set()
    if row.gran == "warp":
        out.add(WARP)
    if row.gran in ("block", "line"):
        out.add(BLOCK)
    if row.combine == "shuffle":
        out.add(SHUFFLE)
    if any(p.online for p in row.passes):
        out.add(ONLINE)
    if deco.vector:
        out.add(VECTOR)
    if deco.items is not None:
        out.add(CACHE)
    return out


def _kinds(config: dict) -> frozenset:
    anchor = (config.get("anchor") or "").lower()
    if "store" in anchor:
        return frozenset({"store"})
    if "load" in anchor:
        return frozenset({"load"})
    return frozenset({"load", "store"})


def _items(config: dict) -> int:
    """Units per thread of the register cache: the card's measured per-thread factor (role "factor"),
    the most common over its kernels; DEFAULT_ITEMS when it names none."""
    vals = [it["value"] for m in config.get("measured") or [] for it in (m.get("values") or [])[:]
            if it.get("role") == "factor" and isinstance(it.get("value"), int) and 1 <= it["value"] <= 64]
    if config.get("items"):
        vals = [int(config["items"])]
    return max(set(vals), key=lambda x: (vals.count(x), -x)) if vals else DEFAULT_ITEMS


def add(source: str, mechanism: str, config: dict | None = None) -> tuple[str, dict]:
    """(`source` with `mechanism` added, the parameters chosen); raises _NA with the reason."""
    config = config or {}
    row, deco, items = analyse(source)
    have = present(row, deco)
    if mechanism in have:
        raise _NA(f"the kernel has {mechanism} already")
    chosen: dict = {}
    strided = row.layout == "strided"
    if mechanism in (WARP, BLOCK):
        if {WARP, BLOCK} & have:
            raise _NA(f"the row is shared by a {'block' if row.gran == 'line' else row.gran} already")
        if deco.vector or deco.items:
            raise _NA("a decorated kernel is one shared by a warp or block already")
        if strided and mechanism == WARP:
            raise _NA(f"the row is strided (its elements {row.stride} apart): a warp sharing it would read 32 "
                      "far-apart elements a load; block_per_row shares it across a block's warps, each warp "
                      "reading 32 neighbouring rows")
        gran = "warp" if mechanism == WARP else "line" if strided else "block"
        chosen["threads"] = _threads(row, gran, config)
        scalar = to_granularity(row, gran, {**config, "threads": chosen["threads"]})
    elif mechanism == SHUFFLE:
        scalar = to_shuffle(row)
    elif mechanism == ONLINE:
        scalar = to_online(row)
    elif mechanism in (VECTOR, CACHE) and strided:
        raise _NA(f"the row is strided (its elements {row.stride} apart): no 16-byte vector or register unit runs "
                  "along it")
    elif mechanism == VECTOR:
        kinds = _kinds(config)
        deco = replace(deco, vector=deco.vector | kinds)
        chosen["accesses"] = sorted(kinds)
        scalar = row.source
    elif mechanism == CACHE:
        items = _items(config)
        deco = replace(deco, items=_items_name(row))
        chosen["items"] = items
        scalar = row.source
    else:
        raise _NA(f"{mechanism} is not a row-wise mechanism")
    new_row = read_row(scalar)
    out = render(new_row, deco, items)
    if out == source:
        raise _NA(f"{mechanism} changes nothing in this kernel")
    return out, chosen


@register
class RowwiseRewriter(ShapeRewriter):
    """Row-wise reductions and normalisations (this module's docstring)."""
    name = "rowwise"
    mechanisms = MECHANISMS
    ladder = (BLOCK, SHUFFLE, ONLINE, VECTOR, CACHE)

    def recognise(self, source: str, workload=None) -> Shape | NotApplicable:
        try:
            row, deco, _ = analyse(source)
        except _NA as e:
            return NotApplicable(f"not a row-wise reduction: {e}")
        except Exception as e:  # a parse this module did not foresee: not a kernel it knows
            return NotApplicable(f"not a row-wise reduction: {type(e).__name__}: {e}")
        ops = sorted({op for op, _, _ in row.ops} | ({"online"} if ONLINE in present(row, deco) else set()))
        return Shape("rowwise", row.kernel, {
            "operator": "strided_reduction" if row.layout == "strided" else "row_reduction",
            "granularity": row.gran, "combine": row.combine, "passes": len(row.passes), "ops": ops,
            "pointers": dict(row.ptrs), "rows": row.rows, "cols": row.cols, "layout": row.layout,
            "stride": row.stride or "1", "vector": sorted(deco.vector), "cache": deco.items,
            "mechanisms": sorted(present(row, deco)), "refuses": sorted(_refuses(row, ops))})

    def rewrite(self, source: str, shape: Shape, mechanism: str, config: dict, workload=None) -> Applied | NotApplicable:
        if mechanism not in self.mechanisms:
            return NotApplicable(f"{mechanism} is not a row-wise mechanism")
        try:
            out, chosen = add(source, mechanism, config)
        except _NA as e:
            return NotApplicable(str(e))
        except Exception as e:  # never raise for a kernel this module misreads
            return NotApplicable(f"the {mechanism} rewrite failed on this kernel: {type(e).__name__}: {e}")
        return Applied(out, mechanism, f"{shape.kernel}:{mechanism}", before=_kernel_text(source, shape.kernel),
                       after=_kernel_text(out, shape.kernel), config={"shape": "rowwise", **chosen})


def _refuses(row: Row, ops: list[str]) -> set[str]:
    """The mechanisms this kernel's shape cannot take whatever comes first: a strided row no warp per
    row, shuffles, vectors or register cache; a row without a max and a sum pass no online softmax;
    one pass nothing to keep in registers for a second."""
    out = {WARP, SHUFFLE, VECTOR, CACHE} if row.layout == "strided" else set()
    if not {"max", "sum"} <= set(ops) and "online" not in ops:
        out.add(ONLINE)
    if len(row.passes) < 2:
        out.add(CACHE)
    return out


def _kernel_text(source: str, name: str) -> str:
    k = Kernel(source)
    fn = next((f for f in _kernels(k) if syntax.function_name(f) == name), None)
    return k.tree.text_of(fn) if fn is not None else ""
