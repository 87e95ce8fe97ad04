"""The calibrator contract: :class:`LogitCalibrator`, the base every calibrator implements.

A calibrator maps a box's raw logit ``z`` (and, for a per-class map, its predicted class) to a
calibrated logit; the conf it reports is ``sigmoid`` of that. The contract:

- ``fit(logits, labels, *, classes=None, weights=None, groups=None) -> self``: ``groups`` are the
  boxes' image ids (per-class maps cross-validate their shrinkage over them); ``labels`` are 0/1,
  or, where :attr:`soft_labels` says so, soft labels in [0, 1] (the IoU target);
- ``transform_logits(logits, *, classes=None)`` and ``predict_proba`` (its ``sigmoid``);
- ``to_dict()`` / ``from_dict(d)``: a JSON-able dict whose ``format`` string (:attr:`format`) is
  frozen: files written by earlier versions carry it;
- :attr:`per_class`: one map per class (the ranking across classes, hence mAP, may change);
- :attr:`uses_size`: the map also reads each box's size, ``log_area`` (the log of the box's area
  over its image's area, :func:`log_area`), given to ``fit`` and ``transform_logits`` as a keyword
  array; it re-ranks boxes of one class and cannot fold into the class conv (:func:`reranks`);
- the deployment form for folding into a checkpoint: :meth:`affine_params` (``a_c z + b_c`` per
  class channel, folded into the last conv) or :meth:`hinge_maps` (piecewise-linear maps, appended
  as hinge layers); :attr:`deploy_form` says which;
- :meth:`equivalent_conf`: the calibrated threshold keeping the boxes a raw threshold keeps;
- for ``--method auto``'s cross-validation: :attr:`cv_grid` (per-class maps: the shrinkage values
  the CV tries) and :meth:`fit_grid` (one fit per grid value on a training fold).

Its place in the simplicity order and its method name are given when it is registered
(:func:`det_calib.calibrators.registry.register`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from det_calib.errors import InputError
from det_calib.numeric import sigmoid

__all__ = [
    "LogitCalibrator",
    "NotFittedError",
    "box_kwargs",
    "calibrated_logits",
    "equivalent_conf",
    "log_area",
    "number_words",
    "spread_words",
]

#: The smallest relative area :func:`log_area` takes (a box of zero area reads as this).
MIN_REL_AREA = 1e-8

_DeployForm = Literal["affine", "hinges"]


class NotFittedError(RuntimeError):
    """A calibrator was used before ``fit`` (or ``from_dict``).

    Raised by methods that need the fitted state (``transform_logits``, ``predict_proba``,
    ``to_dict``) on an instance that has none.
    """


class LogitCalibrator:
    """Base of every calibrator; see the module docstring for the contract.

    Subclasses set :attr:`format` and, when it applies, :attr:`per_class`, :attr:`deploy_form`,
    :attr:`cv_grid`, and ``_fitted_attr`` (an attribute that exists once fitted).
    """

    #: The frozen ``format`` string of :meth:`to_dict`.
    format: ClassVar[str] = ""
    #: One map per predicted class (``transform_logits`` needs ``classes``).
    per_class: ClassVar[bool] = False
    #: How the map is folded into a checkpoint: ``"affine"`` or ``"hinges"``.
    deploy_form: ClassVar[_DeployForm] = "affine"
    #: ``fit`` handles soft labels in [0, 1] correctly (``--target iou``: the IoU of the box's match)
    #: as its loss's soft form: a calibrator that does not set it is left out of that target's choice.
    soft_labels: ClassVar[bool] = False
    #: The map reads each box's ``log_area`` besides its logit (and class): see the module docstring.
    uses_size: ClassVar[bool] = False
    _fitted_attr: ClassVar[str] = ""

    @property
    def cv_grid(self) -> tuple[float, ...] | None:
        """The shrinkage values ``auto``'s CV tries for this map (None: nothing to tune)."""
        return None

    def _check_fitted(self) -> None:
        if not hasattr(self, self._fitted_attr):
            raise NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet. Call `fit` with "
                "appropriate arguments "
                f"(or build it with `{type(self).__name__}.from_dict`) before using this method."
            )

    def fit(
        self,
        logits: Any,
        labels: Any,
        *,
        classes: Any = None,
        weights: Any = None,
        groups: Any = None,
    ) -> LogitCalibrator:  # pragma: no cover
        raise NotImplementedError

    def transform_logits(
        self, logits: Any, *, classes: Any = None
    ) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def predict_proba(self, logits: Any, *, classes: Any = None) -> np.ndarray:
        """Calibrated probabilities ``sigmoid(transform_logits(logits))``, shape ``(n,)``."""
        return sigmoid(self.transform_logits(logits, classes=classes))

    def to_dict(self) -> dict[str, Any]:  # pragma: no cover
        raise NotImplementedError

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LogitCalibrator:  # pragma: no cover
        raise NotImplementedError

    @classmethod
    def words(cls, d: dict[str, Any], method: str) -> str:
        """The fitted map in a few words (the report's), read from its :meth:`to_dict` output ``d``
        (a run record's ``map``; possibly partial: missing values read "n/a")."""
        return method

    # deployment ---------------------------------------------------------------------------------

    def affine_params(self, n_classes: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``(a, b)`` (float64, length ``n_classes``) when the map is ``a_c z + b_c``, else None."""
        return None

    def hinge_maps(self, n_classes: int) -> list[Any] | None:
        """One :class:`~det_calib.calibrators.isotonic.PiecewiseLinear` per class, else None."""
        return None

    def deployed_conf(
        self, logits: np.ndarray, classes: np.ndarray, raw_conf: np.ndarray
    ) -> np.ndarray:
        """The conf each box gets under this map (float64): ``sigmoid`` of its calibrated logit."""
        z = np.asarray(logits, dtype=np.float64)
        return sigmoid(
            np.asarray(self.transform_logits(z, classes=np.asarray(classes)), dtype=np.float64)
        )

    def equivalent_conf(self, conf: float, cls: int | None = None) -> float | None:
        """The calibrated threshold that keeps exactly the boxes whose raw conf is above ``conf``.

        It is the calibrated conf of a box whose raw conf is ``conf``, provided the map is strictly
        increasing from there (every box scored higher raw is scored higher calibrated); a map found
        flat just above ``conf`` (a probe step of 1e-7 in logit) gets None, as there is no such
        threshold. A per-class map has one per class (``cls``); over all classes, None.
        """
        if not 0 < conf < 1:
            return None
        if self.per_class and cls is None:
            return None
        z = math.log(conf) - math.log1p(-conf)
        zz = np.array([z, z + 1e-7 * max(1.0, abs(z))])
        t = np.asarray(
            self.transform_logits(
                zz, classes=np.full(2, 0 if cls is None else int(cls), dtype=np.int64)
            ),
            dtype=np.float64,
        )
        if not t[1] > t[0]:
            return None
        return float(sigmoid(t[:1])[0])

    # auto's cross-validation --------------------------------------------------------------------

    def fit_grid(
        self,
        logits: np.ndarray,
        labels: np.ndarray,
        *,
        classes: np.ndarray | None,
        weights: np.ndarray,
        grid: Sequence[float | None],
        build: Callable[[float | None], LogitCalibrator],
        log_area: np.ndarray | None = None,
    ) -> list[LogitCalibrator]:
        """Fitted calibrators on one training fold, one per ``grid`` value (``build(value)`` gives an
        unfitted one; a map with no :attr:`cv_grid` gets ``grid == [None]``). ``self`` is an
        unfitted prototype; subclasses may share work across the grid. ``log_area``: the boxes'
        sizes, for a map that :attr:`uses_size`."""
        kw = box_kwargs(self, classes=classes if self.per_class else None, log_area=log_area)
        if grid == [None]:
            return [self.fit(logits, labels, weights=weights, **kw)]
        return [build(g).fit(logits, labels, weights=weights, **kw) for g in grid]


def calibrated_logits(
    cal: LogitCalibrator, z: np.ndarray, cls: np.ndarray, log_area: np.ndarray | None = None
) -> np.ndarray:
    """Calibrated logits (float64) of boxes (``z`` raw logits, ``cls`` their classes, ``log_area``
    their sizes, :func:`log_area`, needed by a map that :attr:`~LogitCalibrator.uses_size`) under ``cal``."""
    kw = box_kwargs(cal, classes=np.asarray(cls), log_area=log_area)
    return np.asarray(cal.transform_logits(np.asarray(z, dtype=np.float64), **kw), dtype=np.float64)


def box_kwargs(
    cal: LogitCalibrator, *, classes: Any = None, log_area: Any = None
) -> dict[str, Any]:
    """The keyword arrays ``cal.fit`` / ``cal.transform_logits`` take besides the logits: ``classes``
    (where given), and ``log_area`` for a map that :attr:`~LogitCalibrator.uses_size` (an
    :class:`~det_calib.errors.InputError` when it is missing)."""
    kw: dict[str, Any] = {} if classes is None else {"classes": classes}
    if getattr(cal, "uses_size", False):
        if log_area is None:
            raise InputError(
                f"{type(cal).__name__} reads each box's size: `log_area` is needed (the boxes' "
                "corners "
                "and image sizes)"
            )
        kw["log_area"] = log_area
    return kw


def _reranks(cal: LogitCalibrator | type[LogitCalibrator]) -> bool:
    """Whether a calibrator (or its class) can change the order of the boxes, hence mAP: a map per
    class, or a map that reads the box's size."""
    return bool(getattr(cal, "per_class", False) or getattr(cal, "uses_size", False))


def log_area(xyxy: Any, img_w: Any, img_h: Any) -> np.ndarray:
    """``log(box area / image area)`` of each box (float64, ``(n,)``): the size a size-conditioned
    map reads, comparable across image resolutions; areas below :data:`MIN_REL_AREA` (degenerate
    or inverted boxes) read as it.

    >>> log_area(np.array([[0., 0., 10., 10.]]), np.array([100]), np.array([100])).round(4).tolist()
    [-4.6052]
    """
    b = np.asarray(xyxy, dtype=np.float64).reshape(-1, 4)
    area = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    img = np.asarray(img_w, dtype=np.float64) * np.asarray(img_h, dtype=np.float64)
    return np.log(np.maximum(area / img, MIN_REL_AREA))


def equivalent_conf(cal: LogitCalibrator, conf: float, cls: int | None = None) -> float | None:
    """:meth:`LogitCalibrator.equivalent_conf` of ``cal``."""
    return cal.equivalent_conf(conf, cls)


def number_words(x: object) -> str:
    """``x`` to 3 significant digits, "n/a" when it is not a number (the words of a map's parameters)."""
    return f"{x:.3g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else "n/a"


def spread_words(name: str, values: object) -> str:
    """``T 0.91–1.32`` of a per-class parameter (its lowest and highest value over the classes)."""
    v = [float(x) for x in values] if isinstance(values, list) and values else []
    return f"{name} {number_words(min(v))}–{number_words(max(v))}" if v else f"{name} n/a"
