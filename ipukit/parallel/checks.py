"""Validation of what a learner passes to the pipeline front ends (issue 12).

Each helper raises a :class:`~ipukit.errors.PipelineConfigError` (or an ``IpuError``)
naming the setting and the fix; the runner and the TensorFlow and PopTorch front ends
call them at their entry points.

>>> from ipukit.parallel import checks
>>> checks.batch_size(0)
Traceback (most recent call last):
...
ipukit.errors.PipelineConfigError: batch_size must be a positive whole number, got 0
"""

from __future__ import annotations

import numpy as np

from ..errors import IpuError, PipelineConfigError
from . import nn, optim
from .nn import is_count


def optimizer_and_loss(optimizer, loss) -> None:
    """The optimiser is an :mod:`.optim` object; the loss is a loss, not a layer."""
    if not isinstance(optimizer, optim.Optimizer):
        raise PipelineConfigError(
            f"optimizer must be an optimiser object, got {optimizer!r}; use e.g. "
            "optim.SGD(0.01), optim.Adam() or optim.AdamW() from ipukit.parallel.optim"
        )
    if isinstance(loss, nn.Layer) or not all(callable(getattr(loss, m, None))
                                             for m in ("forward", "backward")):
        raise PipelineConfigError(
            f"loss must be a loss, got {loss!r}; use nn.SoftmaxCrossEntropy() (the last "
            "stage's outputs are the logits it takes)"
        )


def features(x) -> np.ndarray:
    """``x`` as an array with a sample axis and features."""
    if x is None or np.ndim(x) < 2:
        raise IpuError(f"the samples x must be an array of shape (samples, features...), got "
                       f"{x!r}"[:300])
    return np.asarray(x)


def samples(x, labels) -> tuple[np.ndarray, np.ndarray]:
    """``x`` an array with a sample axis; ``labels`` one integer class per sample."""
    x = features(x)
    y = np.asarray(labels) if labels is not None else None
    if y is None or y.ndim != 1 or y.dtype.kind not in "iu":
        shape = None if y is None else y.shape
        kind = None if y is None else y.dtype
        raise IpuError(
            f"labels must be integer class indices, one per sample (shape ({len(x)},)), got shape "
            f"{shape} of {kind}; for one-hot labels pass labels.argmax(axis=1)"
        )
    return x, y


def batch_size(value) -> int:
    """A positive whole number of samples per forward pass."""
    if not is_count(value):
        raise PipelineConfigError(f"batch_size must be a positive whole number, got {value!r}")
    return int(value)
