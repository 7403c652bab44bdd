"""Plain-text helpers the parsers and the rules share (no parser behind them)."""
from __future__ import annotations


def split_top_level(text: str, opens: str = "([<{", closes: str = ")]>}") -> list[str]:
    """`text` split at the commas outside every bracket pair of `opens`/`closes`, each part stripped,
    an empty last part dropped: the arguments of a call or template, the operands of an instruction."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in opens:
            depth += 1
        elif ch in closes:
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out
