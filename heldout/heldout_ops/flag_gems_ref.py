"""The FlagGems reference of the held-out GEMM and reduction instances: the function imported on the first
vendor call, and the check of what it returns. Templates for heldout_ops.bind: each instance gets its
own copies, reading its NAME, VENDOR_FALLBACK and _vendor_fn (see heldout_ops/__init__.py)."""
import torch

from heldout_ops import bind


def _flag_gems(module, attr):
    """`module.attr` of flag-gems, imported on first use (the wheel travels to the GPU machine with
    sqlalchemy and greenlet; it is not installed where no GPU is). Raises RuntimeError naming what is
    missing instead of falling back to anything silently."""
    global _vendor_fn
    if _vendor_fn is None:
        import importlib

        try:
            mod = importlib.import_module(module)
        except Exception as exc:  # any import failure (missing wheel, triton mismatch) is reported as such
            raise RuntimeError(f"{NAME}: cannot import {module} ({type(exc).__name__}: {exc}); install the "
                               "flag-gems wheel with sqlalchemy and greenlet, or time vendor_fallback "
                               f"({VENDOR_FALLBACK})") from exc
        fn = getattr(mod, attr, None)
        if not callable(fn):
            raise RuntimeError(f"{NAME}: {module}.{attr} does not exist in this flag-gems version; time "
                               f"vendor_fallback ({VENDOR_FALLBACK}) and say so in the report")
        _vendor_fn = fn
    return _vendor_fn


def _checked(op, out, dims):
    """`out` when it is a bf16 tensor of `dims`; otherwise a RuntimeError naming the mismatch (a FlagGems
    signature that changed must not pass unnoticed)."""
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(dims) or out.dtype != torch.bfloat16:
        got = (tuple(out.shape), out.dtype) if isinstance(out, torch.Tensor) else type(out).__name__
        raise RuntimeError(f"{NAME}: {op} returned {got}, expected a bf16 tensor of shape {tuple(dims)}: the "
                           "flag-gems signature differs from the one this workload was written against")
    return out


def define(ns: dict) -> dict:
    """_vendor_fn (None: the FlagGems function, imported on the first vendor call), _flag_gems and
    _checked, bound to the instance namespace `ns`."""
    return {"_vendor_fn": None, **bind(ns, _flag_gems, _checked)}
