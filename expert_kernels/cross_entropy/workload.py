"""cross_entropy: fused log-softmax + NLL per row over fp32 logits.

loss[b] = logsumexp(logits[b, :]) - logits[b, labels[b]], labels int64 in [0, vocab), loss fp32.
"""
import torch
import torch.nn.functional as F

NAME = "cross_entropy"
FAMILY = "reduction"
DTYPES = ("float32", "int64")
ENTRY = "cross_entropy"
ARGS = [
    {"name": "logits", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "labels", "kind": "ptr", "dtype": "int64", "role": "in"},
    {"name": "loss", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "batch", "kind": "int"},
    {"name": "vocab", "kind": "int"},
]
# LLM training shapes: a Llama-2 (32000) and a Llama-3 (128256) vocabulary, 4096 tokens.
BENCHMARK_CASES = [{"batch": 4096, "vocab": 32000}, {"batch": 4096, "vocab": 128256}]
# Vocabularies that are not a multiple of the 4-float vector (every row then starts at another
# 16-byte phase), one element, one row, rows shorter than a warp, a vocabulary just past the
# benchmark ones, and bases 1 and 3 elements past alignment (logits, labels and loss alike), one on
# a vocabulary that is a multiple of the vector (every row then has a head and a tail), and a base
# 16-byte aligned but not 256-byte aligned (offset 4).
PROBE_SHAPES = [
    {"batch": 1, "vocab": 1},
    {"batch": 3, "vocab": 7},
    {"batch": 9, "vocab": 33},
    {"batch": 1, "vocab": 128256},
    {"batch": 5, "vocab": 32001},
    {"batch": 2, "vocab": 128257},
    {"batch": 130, "vocab": 1030},
    {"batch": 7, "vocab": 32003, "offset": 1},
    {"batch": 6, "vocab": 4099, "offset": 3},
    {"batch": 4, "vocab": 5, "offset": 1},
    {"batch": 3, "vocab": 8192, "offset": 1},
    {"batch": 5, "vocab": 2048, "offset": 4},
]
# fp32 math over up to 128257 terms. A serial fp32 sum of the exponentials (the naive kernel)
# drops ~1.2e-5 of the sum (terms near the sum's half-ulp are rounded away, always downward),
# i.e. ~2e-4 on a loss of ~16; tree / per-thread-partial sums and fast exponentials stay near 1e-6.
# A bf16 rounding anywhere on the path costs ~4e-3 relative and a lost or doubled element ~1e-1
# (every row carries a peak holding about half the probability mass), so 1e-4 separates them with
# ~5x margin over the naive kernel. Every row is one output: min_matched 1.0, a wrong row is a bug.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4, "min_matched": 1.0}
VENDOR_NAME = "torch.compile(F.cross_entropy(logits, labels, reduction='none'), dynamic=False) (fp32)"

SIGMA = 3.0          # logit spread: N(0, 3^2) gives p(label) spread over several orders of magnitude
SHIFT = 100.0        # rows 2 and 3 (mod 4) are shifted by +-SHIFT: exp overflows / underflows in fp32
_REF_ELEMS = 1 << 25  # float64 reference computed in row chunks of at most this many elements


def make_logits(shape, g, device):
    """fp32 logits ~ N(0, SIGMA^2) with four row kinds (row index mod 4):
    0 plain; 1 a peak at a random column; 2 shifted by +SHIFT with the peak in the last column;
    3 shifted by -SHIFT with the peak in column 0. A peak is set to the row's logsumexp, so it holds
    about half the row's probability mass: a kernel that loses or doubles it is off by ~0.4-0.7."""
    b, v = shape["batch"], shape["vocab"]
    x = torch.randn(b, v, generator=g, device=device, dtype=torch.float32).mul_(SIGMA)
    peak_col = torch.randint(0, v, (b,), generator=g, device=device, dtype=torch.int64)
    x[2::4].add_(SHIFT)
    x[3::4].sub_(SHIFT)
    lse = torch.logsumexp(x, dim=1)
    rows = torch.arange(b, device=device)
    x[rows[1::4], peak_col[1::4]] = lse[1::4]
    x[2::4, v - 1] = lse[2::4]
    x[3::4, 0] = lse[3::4]
    return x


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    labels = torch.randint(0, shape["vocab"], (shape["batch"],), generator=g, device=device, dtype=torch.int64)
    return {"logits": make_logits(shape, g, device), "labels": labels}


def outputs(shape):
    return {"loss": ((shape["batch"],), "float32")}


def scalars(shape):
    return {"batch": shape["batch"], "vocab": shape["vocab"]}


def reference(inputs, shape):
    x, lab = inputs["logits"], inputs["labels"]
    out = torch.empty(x.shape[0], dtype=torch.float64, device=x.device)
    step = max(1, _REF_ELEMS // max(1, x.shape[1]))
    for r in range(0, x.shape[0], step):
        xd = x[r:r + step].double()
        out[r:r + step] = torch.logsumexp(xd, dim=1) - xd.gather(1, lab[r:r + step, None]).squeeze(1)
    return {"loss": out}


def _cross_entropy(logits, labels):
    return F.cross_entropy(logits, labels, reduction="none")


_compiled = None  # torch.compile'd _cross_entropy, built on the first vendor call (compiles per shape)


def vendor(inputs, shape):
    global _compiled
    if _compiled is None:
        _compiled = torch.compile(_cross_entropy, dynamic=False, fullgraph=True)
    return {"loss": _compiled(inputs["logits"], inputs["labels"])}


def bytes_moved(shape):
    # logits read once, labels (int64) read once, loss (fp32) written once
    b, v = shape["batch"], shape["vocab"]
    return b * v * 4 + b * 8 + b * 4


def flops(shape):
    # per logit: max compare, subtract, exp, add
    return 4 * shape["batch"] * shape["vocab"]
