"""A classifier's calibration on one split, with its intervals and its sampling floor.

The figures of :mod:`det_calib.tasks.classify.metrics` for a set of images' class
probabilities, plus, for the top-label ECE:

* a 90% interval from the image bootstrap (images drawn with replacement);
* the **sampling floor**: the top-label ECE a perfectly calibrated classifier would show on these
  images by chance alone (each image's top-1 correct with probability its top-1 confidence), its
  mean and 90% interval over seeded draws. An ECE inside that interval cannot be told from a
  calibrated one on this many images ("at its floor").

Example:
    >>> import numpy as np
    >>> p = np.full((400, 2), 0.5); p[:, 0] = 0.8; p[:, 1] = 0.2
    >>> y = (np.arange(400) % 5 == 0).astype(int)  # class 0 right 80% of the time: calibrated
    >>> e = evaluate_classifier(p, y, n_draws=50, seed=0)
    >>> e.top_label_ece < 1e-9, e.at_floor
    (True, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from det_calib.codec import encode
from det_calib.metrics.calibration import ece
from det_calib.tasks.classify.metrics import (
    classwise_ece,
    multiclass_brier,
    multiclass_nll,
    top_k_accuracy,
    top_label_ece,
)

__all__ = ["ClassifierFigures", "evaluate_classifier"]


@dataclass(frozen=True)
class ClassifierFigures:
    """One split's calibration figures for one set of class probabilities."""

    images: int
    top_label_ece: float
    ece_interval: tuple[float, float]
    floor: float
    floor_interval: tuple[float, float]
    classwise_ece: float
    nll: float
    brier: float
    top1: float
    top5: float
    mean_confidence: float

    @property
    def at_floor(self) -> bool:
        """Whether the top-label ECE lies at or below its floor's upper bound."""
        return self.top_label_ece <= self.floor_interval[1]

    def to_dict(self) -> dict:
        """Plain JSON values (the intervals as lists)."""
        return {**encode(self), "at_floor": self.at_floor}


def evaluate_classifier(
    prob: np.ndarray, labels: np.ndarray, *, n_bins: int = 15, n_draws: int = 200, seed: int = 0
) -> ClassifierFigures:
    """The figures of ``prob`` (``(n, K)``) against the true classes ``labels`` (``(n,)``)."""
    p, y = np.asarray(prob, dtype=np.float64), np.asarray(labels, dtype=np.int64)
    conf, right = p.max(axis=1), p.argmax(axis=1) == y
    rng = np.random.default_rng(seed)
    boot = [
        ece(conf[i], right[i], n_bins=n_bins)
        for i in (rng.integers(0, y.size, y.size) for _ in range(n_draws))
    ]
    floor = [ece(conf, rng.random(y.size) < conf, n_bins=n_bins) for _ in range(n_draws)]
    q = (0.05, 0.95)
    return ClassifierFigures(
        images=int(y.size),
        top_label_ece=top_label_ece(p, y, n_bins=n_bins),
        ece_interval=tuple(float(v) for v in np.quantile(boot, q)),
        floor=float(np.mean(floor)),
        floor_interval=tuple(float(v) for v in np.quantile(floor, q)),
        classwise_ece=classwise_ece(p, y, n_bins=n_bins),
        nll=multiclass_nll(p, y),
        brier=multiclass_brier(p, y),
        top1=top_k_accuracy(p, y, 1),
        top5=top_k_accuracy(p, y, 5),
        mean_confidence=float(conf.mean()),
    )
