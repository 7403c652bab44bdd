"""Code similarity by winnowed token fingerprints, for the memorization audit.

A source is reduced to a normalized token stream: comments and #include lines dropped; C/C++ and
CUDA keywords, CUDA built-in variables and double-underscore intrinsics kept as themselves; every
other identifier becomes ID, every number NUM, every string or character literal STR; punctuation
kept. Renaming variables or retuning constants therefore changes nothing. Every k consecutive tokens
(a k-gram) are hashed (blake2b, 8 bytes: the same on every machine); in every window of w
consecutive k-gram hashes the smallest is selected (the rightmost on ties), and the selected hashes
form the fingerprint set (winnowing: any shared run of at least w + k - 1 tokens is guaranteed to
share a fingerprint). Two sources compare by the Jaccard index of their fingerprint sets and by
containment, |A & B| / |A|: how much of A is found in B.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

K = 12
WINDOW = 8

KEYWORDS = frozenset("""
alignas alignof asm auto bool break case catch char class const constexpr const_cast continue decltype default
delete do double dynamic_cast else enum explicit extern false float for friend goto if inline int long mutable
namespace new noexcept nullptr operator private protected public register reinterpret_cast return short signed
sizeof static static_assert static_cast struct switch template this throw true try typedef typename union
unsigned using virtual void volatile while define ifdef ifndef endif pragma unroll if elif undef
threadIdx blockIdx blockDim gridDim warpSize dim3 cudaStream_t cudaError_t cudaSuccess
float2 float4 int2 int4 uint2 uint4 half half2 size_t
""".split())

_TOKEN = re.compile(r"""
    (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<include>\#\s*include[^\n]*)
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<number>(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)[uUlLfF]*)
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<space>\s+)
  | (?P<punct>::|->|<<|>>|<=|>=|==|!=|&&|\|\||\+\+|--|[-+*/%=&|^~!<>?:;,.(){}\[\]\#])
  | (?P<other>.)
""", re.S | re.X)


def tokens(source: str) -> list[str]:
    """The normalized token stream of a CUDA/C++ source."""
    out = []
    for m in _TOKEN.finditer(source):
        kind = m.lastgroup
        text = m.group()
        if kind in ("comment", "include", "space"):
            continue
        if kind == "ident":
            out.append(text if text in KEYWORDS or text.startswith("__") else "ID")
        elif kind == "number":
            out.append("NUM")
        elif kind == "string":
            out.append("STR")
        else:
            out.append(text)
    return out


def _hash(gram: tuple[str, ...]) -> int:
    return int.from_bytes(hashlib.blake2b(" ".join(gram).encode(), digest_size=8).digest(), "big")


def fingerprints(source: str, k: int = K, window: int = WINDOW) -> frozenset[int]:
    """The winnowed fingerprint set of a source (empty when it has fewer than k tokens)."""
    toks = tokens(source)
    hashes = [_hash(tuple(toks[i:i + k])) for i in range(len(toks) - k + 1)]
    if not hashes:
        return frozenset()
    if len(hashes) <= window:
        return frozenset([min(hashes)])
    picked = set()
    for i in range(len(hashes) - window + 1):
        win = hashes[i:i + window]
        lo = min(win)
        j = max(p for p, h in enumerate(win) if h == lo)  # the rightmost minimum
        picked.add((i + j, lo))
    return frozenset(h for _, h in picked)


@dataclass(frozen=True)
class Score:
    jaccard: float
    containment: float  # |A & B| / |A|
    shared: int


def score(a: frozenset[int], b: frozenset[int]) -> Score:
    """Similarity of fingerprint set `a` (a produced kernel) to `b` (a source expert file)."""
    shared = len(a & b)
    union = len(a | b)
    return Score(shared / union if union else 0.0, shared / len(a) if a else 0.0, shared)


def similarity(a: str, b: str) -> Score:
    return score(fingerprints(a), fingerprints(b))


METHOD = {"tokens": "comments and #include lines dropped; C/C++/CUDA keywords, built-in variables and __intrinsics "
                    "kept; other identifiers -> ID, numbers -> NUM, literals -> STR",
          "k": K, "window": WINDOW, "hash": "blake2b, 8 bytes, of the k-gram's tokens",
          "jaccard": "|A & B| / |A | B| of the winnowed fingerprint sets",
          "containment": "|A & B| / |A|: the share of the produced kernel's fingerprints found in the expert file"}
