"""Input validation for the whole package: one dialect, one message style.

Every public function of det_calib checks its arrays at the boundary with these helpers and then
calls an unchecked core. Messages follow one pattern, naming the argument:
``Expected argument `name` to be ..., but got ...`` (an :class:`~det_calib.errors.InputError`).

* Generic arrays (metrics and anything that takes per-box vectors): :func:`as_array` (numpy,
  sequence or torch tensor), :func:`as_1d`, :func:`as_float` (finite float64),
  :func:`as_unit` (in [0, 1]), :func:`as_binary` (bool or 0/1), :func:`as_int_ids`,
  :func:`check_lengths`, :func:`as_weights`, :func:`check_positive_int`.
* Per-box vectors of a matching call (one entry per box of a reference argument):
  :func:`as_1d` with ``n`` and ``ref``, :func:`check_length`, :func:`as_real` (inf allowed),
  :func:`as_integers`.
* Options: :func:`check_choice` (one of a fixed set of values).
* Fits (temperature, Platt, per-class and isotonic calibrators): :func:`check_logits`,
  :func:`check_labels`, :func:`check_weights` (at least one positive weight).

>>> as_binary([True, False], "correct").tolist()
[1.0, 0.0]
>>> as_unit([0.5, 2.0], "conf")
Traceback (most recent call last):
...
det_calib.errors.InputError: Expected argument `conf` to contain values in [0, 1], but got values in [0.5, 2]
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from det_calib.errors import InputError

__all__ = [
    "as_1d",
    "as_array",
    "as_binary",
    "as_float",
    "as_int_ids",
    "as_integers",
    "as_real",
    "as_unit",
    "as_weights",
    "check_choice",
    "check_labels",
    "check_length",
    "check_lengths",
    "check_logits",
    "check_positive_int",
    "check_weights",
]


def as_array(x: Any, name: str) -> np.ndarray:
    """Convert a numpy array, sequence or torch tensor (without importing torch) to a numpy array."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor
        x = x.detach().cpu().numpy()
    try:
        return np.asarray(x)
    except Exception as e:  # ragged lists and the like
        raise InputError(
            f"Expected argument `{name}` to be an array, but got one numpy cannot convert ({e})"
        ) from None


def check_logits(logits: Any, kind: str) -> np.ndarray:
    """Logits of a fit: float64, shape (n,) for ``kind="sigmoid"``, (n, K >= 2) for ``"softmax"``."""
    z = as_array(logits, "logits")
    if z.dtype == bool or not (
        np.issubdtype(z.dtype, np.floating) or np.issubdtype(z.dtype, np.integer)
    ):
        raise InputError(
            f"Expected argument `logits` to be a real-valued array, but got dtype {z.dtype}"
        )
    if kind == "sigmoid" and z.ndim != 1:
        raise InputError(
            f"Expected argument `logits` of shape (n,) for kind='sigmoid', but got shape {z.shape}"
        )
    if kind == "softmax" and (z.ndim != 2 or z.shape[1] < 2):
        raise InputError(
            "Expected argument `logits` of shape (n, K) with K >= 2 for kind='softmax', but got "
            f"shape {z.shape}"
        )
    return z.astype(np.float64, copy=False)


def check_labels(labels: Any, kind: str, n: int, n_classes: int) -> np.ndarray:
    """Labels of a fit: float64 0/1 or soft labels in [0, 1] (``"sigmoid"``; integer labels must be 0/1)
    or intp class ids in ``[0, n_classes)``."""
    y = as_array(labels, "labels")
    if y.ndim != 1:
        raise InputError(f"Expected argument `labels` of shape (n,), but got shape {y.shape}")
    if y.shape[0] != n:
        raise InputError(
            f"Expected argument `labels` to have the length of `logits` ({n}), but got {y.shape[0]}"
        )
    if kind == "sigmoid":
        if y.dtype == bool:
            return y.astype(np.float64)
        if not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating)):
            raise InputError(
                f"Expected argument `labels` to be bool or 0/1, but got dtype {y.dtype}"
            )
        # soft labels (a target in [0, 1], e.g. the IoU of the box's match) are floats in [0, 1]
        ok = np.isin(y, (0, 1)) if np.issubdtype(y.dtype, np.integer) else (y >= 0) & (y <= 1)
        if not ok.all():
            bad = y[~ok][:3].tolist()
            raise InputError(
                "Expected argument `labels` to hold only 0/1 (or soft labels in [0, 1]) for "
                "kind='sigmoid', "
                f"but got e.g. {bad}"
            )
        return y.astype(np.float64)
    if not np.issubdtype(y.dtype, np.integer):
        raise InputError(
            "Expected argument `labels` to hold integer class ids for kind='softmax', but got "
            f"dtype {y.dtype}"
        )
    if n and (y.min() < 0 or y.max() >= n_classes):
        raise InputError(
            f"Expected argument `labels` to hold class ids in [0, {n_classes}), "
            f"but got values in [{y.min()}, {y.max()}]"
        )
    return y.astype(np.intp, copy=False)


def check_weights(weights: Any, n: int) -> np.ndarray | None:
    """None, or (n,) float64 fit weights: finite, >= 0, at least one positive."""
    if weights is None:
        return None
    w = as_array(weights, "weights")
    if w.ndim != 1 or w.shape[0] != n:
        raise InputError(f"Expected argument `weights` of shape ({n},), but got shape {w.shape}")
    w = w.astype(np.float64)
    if not np.isfinite(w).all() or (w < 0).any():
        raise InputError("Expected argument `weights` to be finite and >= 0")
    if not (w > 0).any():
        raise InputError(
            "Expected argument `weights` to have at least one positive weight, but all are 0"
        )
    return w


def check_positive_int(n_bins: object, name: str = "n_bins") -> int:
    """``n_bins`` (or the argument ``name``) as an int >= 1; booleans are refused."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, numbers.Integral) or n_bins < 1:
        raise InputError(
            f"Expected argument `{name}` to be an integer larger than 0, but got {n_bins!r}"
        )
    return int(n_bins)


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
