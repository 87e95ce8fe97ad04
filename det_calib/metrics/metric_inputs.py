"""The metrics' input checks: per-box confidences, correctness flags, class ids, weights and bin counts,
in the package's one message style (``Expected argument `name` to be ..., but got ...``, an
:class:`~det_calib.errors.InputError`; :mod:`det_calib.validation` holds the dialect's shared checks).

Every public metric checks its arrays with these at its boundary, then calls an unchecked core.

>>> as_binary([True, False], "correct").tolist()
[1.0, 0.0]
>>> as_unit([0.5, 2.0], "conf")
Traceback (most recent call last):
...
det_calib.errors.InputError: Expected argument `conf` to contain values in [0, 1], but got values in [0.5, 2]
"""

from __future__ import annotations

import numbers

import numpy as np
from numpy.typing import ArrayLike

from det_calib.errors import InputError
from det_calib.validation import as_1d

__all__ = [
    "as_binary",
    "as_float",
    "as_int_ids",
    "as_unit",
    "as_weights",
    "check_lengths",
    "check_positive_int",
]


def check_positive_int(n_bins: object, name: str = "n_bins") -> int:
    """``n_bins`` (or the argument ``name``) as an int >= 1; booleans are refused."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, numbers.Integral) or n_bins < 1:
        raise InputError(
            f"Expected argument `{name}` to be an integer larger than 0, but got {n_bins!r}"
        )
    return int(n_bins)


def as_float(x: ArrayLike, name: str) -> np.ndarray:
    """1-D float64 array of finite numbers (bool and integer dtypes are converted)."""
    arr = as_1d(x, name)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise InputError(f"Expected argument `{name}` to be numeric, but got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if arr.size and not np.isfinite(arr).all():
        raise InputError(f"Expected argument `{name}` to be finite, but it contains nan or inf")
    return arr


def as_unit(x: ArrayLike, name: str, *, tol: float = 0.0) -> np.ndarray:
    """Float array with values in [0, 1] (values up to ``1 + tol`` are clipped to 1)."""
    arr = as_float(x, name)
    if arr.size:
        lo, hi = float(arr.min()), float(arr.max())
        if lo < 0.0 or hi > 1.0 + tol:
            raise InputError(
                f"Expected argument `{name}` to contain values in [0, 1], but got values in "
                f"[{lo:g}, {hi:g}]"
            )
        if tol and hi > 1.0:
            arr = np.minimum(arr, 1.0)
    return arr


def as_binary(x: ArrayLike, name: str) -> np.ndarray:
    """Float array of 0.0/1.0 from a bool or 0/1 array."""
    arr = as_1d(x, name)
    if arr.dtype == bool:
        return arr.astype(np.float64)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise InputError(f"Expected argument `{name}` to be bool or 0/1, but got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    bad = ~((arr == 0.0) | (arr == 1.0))
    if bad.any():
        raise InputError(
            f"Expected argument `{name}` to be bool or 0/1, but got values such as "
            f"{arr[bad][:3].tolist()}"
        )
    return arr


def as_int_ids(x: ArrayLike, name: str) -> np.ndarray:
    """1-D int64 array of ids (integer dtype, or floats that are whole numbers)."""
    arr = as_1d(x, name)
    if np.issubdtype(arr.dtype, np.integer):
        return arr.astype(np.int64, copy=False)
    if arr.dtype != object and np.issubdtype(arr.dtype, np.floating):
        if arr.size == 0 or (np.isfinite(arr).all() and (arr == np.round(arr)).all()):
            return arr.astype(np.int64)
    raise InputError(
        f"Expected argument `{name}` to hold integer class ids, but got dtype {arr.dtype}"
    )


def check_lengths(**arrays: np.ndarray) -> int:
    """The common length of the named arrays; the first name is the reference in the message."""
    names = list(arrays)
    first = names[0]
    n = len(arrays[first])
    for other in names[1:]:
        m = len(arrays[other])
        if m != n:
            raise InputError(
                f"Expected arguments `{first}` and `{other}` to have the same length, but got {n} "
                f"and {m}"
            )
    return n


def as_weights(weights: ArrayLike | None, n: int, ref: str) -> np.ndarray | None:
    """None, or (n,) float64 finite non-negative per-box weights (``ref``: the array they go with)."""
    if weights is None:
        return None
    w = as_float(weights, "weights")
    if len(w) != n:
        raise InputError(
            f"Expected arguments `{ref}` and `weights` to have the same length, but got {n} and "
            f"{len(w)}"
        )
    if w.size and float(w.min()) < 0.0:
        raise InputError(
            f"Expected argument `weights` to be non-negative, but got {float(w.min()):g}"
        )
    return w
