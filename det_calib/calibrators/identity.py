"""The ``none`` method: the raw logits unchanged (the baseline every calibrator must beat)."""

from __future__ import annotations

from typing import Any

import numpy as np

from det_calib.calibrators.base import LogitCalibrator
from det_calib.calibrators.fit_support import check_logits
from det_calib.calibrators.registry import register

__all__ = ["Identity"]


@register("none", order=0)
class Identity(LogitCalibrator):
    """The ``none`` method: raw logits unchanged. ``fit`` accepts and ignores its data."""

    format = "det_calib.Identity"
    soft_labels = True
    _fitted_attr = "fitted_"

    def fit(
        self,
        logits: Any,
        labels: Any,
        *,
        classes: Any = None,
        weights: Any = None,
        groups: Any = None,
    ) -> Identity:
        self.fitted_ = True
        return self

    def transform_logits(self, logits: Any, *, classes: Any = None) -> np.ndarray:
        return check_logits(logits, "sigmoid").copy()

    def to_dict(self) -> dict[str, Any]:
        """``{"format": "det_calib.Identity", "version": 1}``."""
        return {"format": self.format, "version": 1}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Identity:
        return cls().fit(None, None)

    @classmethod
    def words(cls, d: dict[str, Any], method: str) -> str:
        return "none: raw scores"

    def affine_params(self, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
        return np.ones(n_classes), np.zeros(n_classes)

    def deployed_conf(
        self, logits: np.ndarray, classes: np.ndarray, raw_conf: np.ndarray
    ) -> np.ndarray:
        """The raw ``conf`` itself (what Ultralytics reports, float32), not ``sigmoid(z)`` in float64,
        which can keep one more box at a threshold placed exactly on a score.

        >>> none = Identity().fit(None, None)
        >>> none.deployed_conf(np.array([0.0]), np.array([0]), np.array([0.5], np.float32)).tolist()
        [0.5]
        """
        return np.asarray(raw_conf, dtype=np.float64)

    def equivalent_conf(self, conf: float, cls: int | None = None) -> float | None:
        """``conf`` itself (in (0, 1); else None)."""
        return float(conf) if 0 < conf < 1 else None
