"""Linear maps (and a linear map followed by GELU) through oneDNN when no gradient is needed on the CPU.

`linear(x, w, b, gelu=False)` is `F.linear` (then `F.gelu`, the exact erf form) everywhere, except for a
float32 CPU tensor with autograd off (held-out scoring, validation, decoding, serving: all run under
`torch.inference_mode()` or `torch.no_grad()`) and no autocast: there it calls oneDNN's inference linear,
`torch.ops.mkldnn._linear_pointwise`, with GELU as a fused post-op. It is there because at the shapes a
CPU evaluates (a few thousand rows against 128 or 512 inputs, and the byte head) aten's float32 linear
takes a slower kernel than oneDNN's, and GELU then costs a pass of its own (`seqlab bench`, "evaluation";
the experiments index).

The result is the same float32 arithmetic: no lower precision, only the order of the additions may
differ, so bits per byte agree with the F.linear path to rounding (tests/test_cpu_linear.py holds the
tolerance). Training never takes this path (it needs
gradients), so its numerics do not change. `use_onednn(False)` turns the path off (tests, A/B timing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _find_op() -> object | None:
    """oneDNN's inference linear, or None where torch was built without it."""
    try:
        if not torch.backends.mkldnn.is_available():
            return None
        return torch.ops.mkldnn._linear_pointwise
    except (AttributeError, RuntimeError):
        return None


_OP = _find_op()
_enabled = True


@contextlib.contextmanager
def use_onednn(enabled: bool) -> Iterator[None]:
    """Within the block, take (True) or never take (False) the oneDNN path; restored afterwards."""
    global _enabled
    before, _enabled = _enabled, enabled
    try:
        yield
    finally:
        _enabled = before


def onednn_applies(x: Tensor) -> bool:
    """Whether `linear` takes oneDNN for input x: float32 on the CPU, autograd off, no CPU autocast."""
    return (_OP is not None and _enabled and x.dtype == torch.float32 and x.device.type == "cpu"
            and not torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu"))


def linear(x: Tensor, w: Tensor, b: Tensor | None = None, gelu: bool = False) -> Tensor:
    """x (..., K) @ w (N, K)^T + b (N,), then GELU (erf) when `gelu`: (..., N) (module docstring)."""
    if onednn_applies(x) and w.dtype == torch.float32 and (b is None or b.dtype == torch.float32):
        return _OP(x, w, b, "gelu" if gelu else "none", [], "none" if gelu else "")  # type: ignore[operator]
    y = F.linear(x, w, b)
    return F.gelu(y) if gelu else y


def apply_linear(module: nn.Linear, x: Tensor) -> Tensor:
    """`module(x)` through `linear` where the module has no hooks (an inspection probe may hook a
    projection's input: then the module itself is called, hooks and all)."""
    if module._forward_pre_hooks or module._forward_hooks or not onednn_applies(x):
        return module(x)
    return linear(x, module.weight, module.bias)
