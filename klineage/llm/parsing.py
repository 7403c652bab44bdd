"""Parsing a model's answer: the one fenced kernel it must hold."""
from __future__ import annotations

import re

from klineage.llm.errors import ParseError

_FENCE_OPEN = re.compile(r"^\s*```\s*([A-Za-z0-9_+#.-]*)\s*$")
_FENCE_CLOSE = re.compile(r"^\s*```\s*$")
_KERNEL_LANGS = {"cuda", "cpp", "c++"}


def parse_kernel(text: str) -> str:
    """The kernel in the answer. Strict: exactly one fenced block, tagged cuda / cpp / c++,
    containing ``extern "C"``; anything else is a ParseError that says what was wrong."""
    blocks: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    lang = ""
    for line in text.splitlines():
        if current is None:
            m = _FENCE_OPEN.match(line)
            if m:
                lang, current = m.group(1).lower(), []
        elif _FENCE_CLOSE.match(line):
            blocks.append((lang, current))
            current = None
        else:
            current.append(line)
    if current is not None:
        raise ParseError("the answer has an unterminated ``` fence (was the output cut off at max_tokens?)")
    if not blocks:
        raise ParseError("the answer has no fenced code block; expected exactly one ```cuda block")
    if len(blocks) > 1:
        tags = ", ".join(repr(b[0] or "untagged") for b in blocks)
        raise ParseError(f"the answer has {len(blocks)} fenced blocks ({tags}); expected exactly one ```cuda block")
    lang, lines = blocks[0]
    if lang not in _KERNEL_LANGS:
        raise ParseError(f"the fenced block is tagged {lang or 'nothing'!r}; expected ```cuda (or ```cpp / ```c++)")
    kernel = "\n".join(lines).strip("\n")
    if 'extern "C"' not in kernel:
        raise ParseError('the fenced block has no extern "C" entry point')
    return kernel + "\n"
