"""Maps of a classifier's logits before its softmax: temperature, vector and matrix scaling.

A classify model scores an image with ``softmax(z)`` of a logit vector ``z`` of its ``K`` classes.
Each map here replaces ``z`` by ``g(z)`` and is fitted by minimising the mean categorical NLL of
``softmax(g(z))`` against the true classes of held-out images:

``temperature``
    ``g(z) = z / T``, one scalar (the textbook case; fitted by
    :class:`~det_calib.calibrators.temperature.TemperatureScaler` with ``kind="softmax"``). It
    never changes an image's top-1 class.
``vector``
    ``g(z) = w * z + b``, a scale and a bias per class (``2K`` parameters). It can change the
    top-1 class.
``matrix``
    ``g(z) = W z + b``, a full linear map (``K^2 + K`` parameters; without a penalty its fit is
    multinomial logistic regression on the logits). An L2 penalty on the off-diagonal of ``W`` and
    on ``b`` (``offdiag_l2``) keeps it near a vector scaling when images are few. It can change
    the top-1 class.
``none``
    ``g(z) = z``: the raw scores, always a candidate.

Vector and matrix scaling are fitted in float64 by L-BFGS with a strong-Wolfe line search, from
the identity map, on the NLL's exact gradient (PyTorch's autograd). :data:`KEEPS_TOP1` says which
maps can change the top-1 class; a caller that chooses one of them must measure top-1 before and
after.

Example:
    >>> import numpy as np
    >>> from det_calib.tasks.classify.softmax_maps import fit_multiclass
    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(0.0, 2.0, (4000, 5))
    >>> y = np.array([rng.choice(5, p=np.exp(r) / np.exp(r).sum()) for r in z])
    >>> t = fit_multiclass("temperature", z * 3.0, y).temperature  # logits planted 3x over-confident
    >>> bool(abs(t - 3.0) < 0.2)
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from det_calib.calibrators.temperature import TemperatureScaler
from det_calib.errors import DegenerateFitError, InputError
from det_calib.numeric import log_softmax

__all__ = ["MULTICLASS_METHODS", "MultiClassMap", "fit_multiclass"]

MULTICLASS_METHODS: tuple[str, ...] = ("none", "temperature", "vector", "matrix")
"""The maps of a classifier's logits, in order of size."""

_KEEPS_TOP1: dict[str, bool] = {"none": True, "temperature": True, "vector": False, "matrix": False}
"""Whether a map keeps every image's top-1 class by construction."""

_MATRIX_MAX_CLASSES = 100
"""Matrix scaling's ``K^2`` parameters are fitted only up to this many classes."""


@dataclass
class MultiClassMap:
    """A fitted map ``z -> W z + b`` of a classifier's logits (``W`` diagonal for temperature and
    vector scaling, the identity for ``none``).

    Attributes:
        method: One of :data:`MULTICLASS_METHODS`.
        weight: ``(K, K)`` float64 matrix ``W``.
        bias: ``(K,)`` float64 vector ``b``.
        temperature: ``T`` of a temperature map (1 for the others).
    """

    method: str
    weight: np.ndarray
    bias: np.ndarray
    temperature: float = 1.0

    def apply(self, logits: np.ndarray) -> np.ndarray:
        """The mapped logits ``W z + b`` of an ``(n, K)`` array."""
        z = np.asarray(logits, dtype=np.float64)
        if self.method == "none":
            return z.copy()
        if self.method in ("temperature", "vector"):
            return z * np.diag(self.weight) + self.bias
        return z @ self.weight.T + self.bias

    def log_proba(self, logits: np.ndarray) -> np.ndarray:
        """``log softmax`` of the mapped logits."""
        return log_softmax(self.apply(logits), axis=1)

    def proba(self, logits: np.ndarray) -> np.ndarray:
        """``softmax`` of the mapped logits: the calibrated class probabilities."""
        return np.exp(self.log_proba(logits))

    @property
    def keeps_top1(self) -> bool:
        """Whether this map keeps every image's top-1 class by construction."""
        return _KEEPS_TOP1[self.method]

    def to_dict(self) -> dict:
        """The map's parameters as plain JSON values."""
        return {
            "method": self.method,
            "temperature": self.temperature,
            "weight": self.weight.tolist(),
            "bias": self.bias.tolist(),
        }


def _checked(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels)
    if z.ndim != 2 or z.shape[1] < 2:
        raise InputError(
            f"a classifier's logits must be an (n, K) array with K >= 2, got shape {z.shape}"
        )
    if y.shape != (z.shape[0],):
        raise InputError(f"{y.shape[0] if y.ndim else 0} labels for {z.shape[0]} images")
    if z.shape[0] == 0:
        raise InputError("no images to fit a classifier's map on")
    if not np.isfinite(z).all():
        raise InputError("a classifier's logits contain NaN or inf")
    if y.dtype.kind not in "iu" or y.min() < 0 or y.max() >= z.shape[1]:
        raise InputError(f"class labels must be integers in [0, {z.shape[1]})")
    return z, y.astype(np.int64)


def fit_multiclass(
    method: str,
    logits: np.ndarray,
    labels: np.ndarray,
    *,
    offdiag_l2: float = 0.0,
    max_iter: int = 500,
) -> MultiClassMap:
    """Fit one of :data:`MULTICLASS_METHODS` by minimising the mean categorical NLL.

    Args:
        method: ``none``, ``temperature``, ``vector`` or ``matrix``.
        logits: ``(n, K)`` logits before the softmax.
        labels: ``(n,)`` true class ids in ``[0, K)``.
        offdiag_l2: Matrix scaling's L2 penalty on the off-diagonal of ``W`` and on ``b`` (per
            parameter, added to the mean NLL).
        max_iter: L-BFGS iterations for vector and matrix scaling.

    Raises:
        InputError: Bad shapes, labels or values; an unknown method; matrix scaling with more than
            :data:`_MATRIX_MAX_CLASSES` classes.
        DegenerateFitError: The temperature fit has no finite optimum, or L-BFGS did not converge.
    """
    if method not in MULTICLASS_METHODS:
        raise InputError(
            f"unknown classifier map {method!r}: choose one of {', '.join(MULTICLASS_METHODS)}"
        )
    z, y = _checked(logits, labels)
    k = z.shape[1]
    if method == "none":
        return MultiClassMap("none", np.eye(k), np.zeros(k))
    if method == "temperature":
        t = float(TemperatureScaler(kind="softmax").fit(z, y).temperature_)
        return MultiClassMap("temperature", np.eye(k) / t, np.zeros(k), temperature=t)
    if method == "matrix" and k > _MATRIX_MAX_CLASSES:
        raise InputError(
            f"matrix scaling fits {k * k + k} parameters for {k} classes: use temperature or "
            f"vector scaling above {_MATRIX_MAX_CLASSES} classes"
        )
    weight, bias = _lbfgs(
        z, y, diagonal=method == "vector", offdiag_l2=offdiag_l2, max_iter=max_iter
    )
    return MultiClassMap(method, weight, bias)


def _lbfgs(
    z: np.ndarray, y: np.ndarray, *, diagonal: bool, offdiag_l2: float, max_iter: int
) -> tuple[np.ndarray, np.ndarray]:
    import torch

    k = z.shape[1]
    zt, yt = torch.from_numpy(z), torch.from_numpy(y)
    w = torch.ones(k, dtype=torch.float64) if diagonal else torch.eye(k, dtype=torch.float64)
    w.requires_grad_(True)
    b = torch.zeros(k, dtype=torch.float64, requires_grad=True)
    off = ~torch.eye(k, dtype=torch.bool)
    opt = torch.optim.LBFGS(
        [w, b],
        lr=1.0,
        max_iter=max_iter,
        tolerance_grad=1e-10,
        tolerance_change=1e-14,
        history_size=20,
        line_search_fn="strong_wolfe",
    )

    def loss() -> torch.Tensor:
        mapped = zt * w + b if diagonal else zt @ w.T + b
        value = torch.nn.functional.cross_entropy(mapped, yt)
        if offdiag_l2 and not diagonal:
            value = value + offdiag_l2 * ((w[off] ** 2).sum() + (b**2).sum())
        return value

    def closure() -> torch.Tensor:
        opt.zero_grad()
        value = loss()
        value.backward()
        return value

    with torch.no_grad():
        start = float(loss())
    opt.step(closure)
    final = float(loss().detach())
    if not np.isfinite(final) or final > start + 1e-12:
        raise DegenerateFitError(
            f"{'vector' if diagonal else 'matrix'} scaling did not converge "
            f"(NLL {start:.4g} -> {final:.4g})"
        )
    weight = torch.diag(w.detach()) if diagonal else w.detach()
    return weight.numpy().copy(), b.detach().numpy().copy()
