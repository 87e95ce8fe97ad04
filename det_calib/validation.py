"""Input validation for the whole package: one dialect, one message style.

Every public function of det_calib checks its arrays at the boundary and then calls an unchecked
core. Messages follow one pattern, naming the argument:
``Expected argument `name` to be ..., but got ...`` (an :class:`~det_calib.errors.InputError`).
The checks here are those several folders share; a folder's own checks sit with it, in the same
style (the metrics' per-box arrays: :mod:`det_calib.metrics.metric_inputs`; a calibrator fit's
logits, labels and weights: :mod:`det_calib.calibrators.fit_support`).

* Per-box vectors (one entry per box of a reference argument): :func:`as_1d` with ``n`` and
  ``ref``, :func:`check_length`, :func:`as_real` (inf allowed), :func:`as_integers`.
* Options: :func:`check_choice` (one of a fixed set of values).

>>> as_integers([3, 1], "det_cls").tolist()
[3, 1]
>>> as_real(np.array([True]), "det_score")
Traceback (most recent call last):
...
det_calib.errors.InputError: Expected argument `det_score` to hold real numbers, but got dtype bool
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from det_calib.errors import InputError

__all__ = ["as_1d", "as_integers", "as_real", "check_choice", "check_length"]


def as_1d(x: ArrayLike, name: str, n: int | None = None, ref: str | None = None) -> np.ndarray:
    """``x`` as a 1-D numpy array (no copy, any dtype); with ``n``, of ``n`` entries, one per box of
    the argument ``ref``."""
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise InputError(
            f"Expected argument `{name}` to be one-dimensional, but got shape {arr.shape}"
        )
    check_length(arr, name, n, ref)
    return arr


def check_length(arr: np.ndarray, name: str, n: int | None, ref: str | None) -> None:
    """Refuse ``arr`` unless it has ``n`` entries, one per box of the argument ``ref`` (None: any)."""
    if n is not None and len(arr) != n:
        raise InputError(
            f"Expected arguments `{ref}` and `{name}` to have the same length (one entry per box), "
            f"but got {n} and {len(arr)}"
        )


def as_real(arr: np.ndarray, name: str) -> np.ndarray:
    """``arr`` (any shape) in float64, refusing booleans, complex and non-numeric dtypes; nan and
    inf pass (check them where they matter)."""
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number) or np.iscomplexobj(arr):
        raise InputError(
            f"Expected argument `{name}` to hold real numbers, but got dtype {arr.dtype}"
        )
    return arr.astype(np.float64, copy=False)


def as_integers(
    x: ArrayLike, name: str, n: int | None = None, ref: str | None = None
) -> np.ndarray:
    """1-D int64 array of an integer dtype (booleans and floats refused; an empty array of any
    dtype passes), ``n`` entries one per box of ``ref``."""
    arr = as_1d(x, name, n, ref)
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise InputError(f"Expected argument `{name}` to hold integers, but got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def check_choice(value: Any, choices: Any, name: str, *, among: str = "") -> Any:
    """``value`` when it is one of ``choices``; else one line naming the choices (``among``: words
    before them, e.g. ``"the run's heads "``).

    >>> check_choice("nms", ("nms", "e2e"), "head")
    'nms'
    >>> check_choice("both", ("nms", "e2e"), "head")
    Traceback (most recent call last):
    ...
    det_calib.errors.InputError: Expected argument `head` to be one of nms, e2e, but got 'both'
    """
    choices = list(choices)
    try:
        ok = value in choices
    except TypeError:  # an unhashable value against a dict's keys
        ok = False
    if not ok:
        raise InputError(
            f"Expected argument `{name}` to be one of {among}{', '.join(map(str, choices))}, "
            f"but got {value!r}",
            param=name,
        )
    return value
