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


def strip_comments(source: str) -> tuple[str, list[tuple[int, str]]]:
    """Source with comments and string literals blanked (newlines kept, so line numbers hold),
    plus the (line, text) of each string literal."""
    out: list[str] = []
    strings: list[tuple[int, str]] = []
    i, n, line = 0, len(source), 1
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            chunk = source[i:j]
            out.append("".join("\n" if ch == "\n" else " " for ch in chunk))
            line += chunk.count("\n")
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and source[j] != c and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            lit = source[i + 1:j]
            if c == '"':
                strings.append((line, lit))
            # keep #include <...> / "..." names visible to the include rules
            keep = source[max(0, source.rfind("\n", 0, i)):i].lstrip().startswith("#")
            out.append(source[i:j + 1] if keep else c + " " * max(0, j - i - 1) + c)
            i = j + 1
        else:
            if c == "\n":
                line += 1
            out.append(c)
            i += 1
    return "".join(out), strings
