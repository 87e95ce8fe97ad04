"""A classifier's reject option: the confidence threshold whose accepted images reach a target accuracy,
with a guarantee on new images.

"Send the uncertain cases to a person": a classifier answers an image only when its top-1
probability is at least ``lambda`` and defers the rest. For a target accuracy ``a`` among the
answered images and a level ``delta``, the rule returns the lowest ``lambda`` of a fixed grid such
that, with probability at least ``1 - delta`` over the calibration images (exchangeable with the
new ones), the accuracy on answered new images is at least ``a``. Each grid threshold is tested by
the exact binomial test of ``H0: accuracy(lambda) < a`` on the calibration images it answers
(images are the unit: each answered image is one Bernoulli draw of "right"), at level
``delta / m`` for a grid of ``m`` thresholds (Bonferroni: the family-wise error is at most
``delta`` whatever the dependence between thresholds, so any rejected threshold, the lowest
included, is safe). The grid is fixed in advance (default 0.05, 0.10, ..., 0.95), never read from
the data. When no threshold is rejected, nothing is certified and the result says so.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> conf = rng.uniform(0.3, 1.0, 5000)
    >>> right = rng.random(5000) < conf  # calibrated: accuracy above lambda grows with lambda
    >>> r = reject_threshold(conf, right, target=0.9, delta=0.1)
    >>> bool(0.8 <= r.threshold <= 0.9), r.certified
    (True, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from det_calib.errors import InputError
from det_calib.io import atomic_path
from det_calib.thresholds.certification import binom_sf

__all__ = ["TOP1_FILE", "RejectRule", "read_top1", "reject_threshold", "write_top1"]

TOP1_FILE = "top1.parquet"
"""A classify run's per-image answers: ``split``, ``image``, ``label``, ``top1_raw``, ``conf_raw`` (the
model's own top-1 class and probability), ``top1``, ``conf`` (after the map: on the fit split the fitted
map's, on the eval split the deployed model's) and ``right`` (``top1 == label``)."""


@dataclass(frozen=True)
class RejectRule:
    """The certified reject threshold and what it gives on the calibration images.

    Attributes:
        target: The accuracy guaranteed among answered images.
        delta: The guarantee holds with probability at least ``1 - delta``.
        threshold: The lowest certified threshold (NaN when none is certified).
        certified: Whether any threshold was certified.
        answered: Share of calibration images answered at ``threshold``.
        accuracy: Accuracy of the answered calibration images at ``threshold``.
    """

    target: float
    delta: float
    threshold: float
    certified: bool
    answered: float
    accuracy: float


def reject_threshold(
    conf: np.ndarray,
    right: np.ndarray,
    *,
    target: float,
    delta: float,
    grid: np.ndarray | None = None,
) -> RejectRule:
    """The lowest threshold certified by fixed-sequence binomial tests (see the module docstring).

    Args:
        conf: ``(n,)`` top-1 probability of each calibration image.
        right: ``(n,)`` whether its top-1 class is the true class.
        target: Accuracy to guarantee among answered images, in (0, 1).
        delta: Level, in (0, 1).
        grid: Thresholds to test, fixed before seeing the data (default: 0.05, 0.10, ..., 0.95).

    Raises:
        InputError: ``target`` or ``delta`` outside (0, 1), or no images.
    """
    for name, v in (("target accuracy", target), ("delta", delta)):
        if not 0.0 < v < 1.0:
            raise InputError(f"the {name} must lie strictly between 0 and 1, got {v}")
    c, y = np.asarray(conf, dtype=np.float64), np.asarray(right, dtype=bool)
    if c.size == 0 or c.shape != y.shape:
        raise InputError(
            f"a reject threshold needs one correctness per image, got {c.size} and {y.size}"
        )
    lams = np.linspace(0.05, 0.95, 19) if grid is None else np.asarray(grid, dtype=np.float64)
    answered = c[None, :] >= lams[:, None]
    n = answered.sum(axis=1)
    k = (answered & y[None, :]).sum(axis=1)
    # p-value of H0: accuracy <= target, from k right out of n: P(Binomial(n, target) >= k); 1 when n = 0
    p = np.where(n > 0, binom_sf(k.astype(float), n.astype(float), target), 1.0)
    ok = np.flatnonzero(p <= delta / lams.size)
    best = (
        None
        if ok.size == 0
        else (
            float(lams[ok].min()),
            int(n[ok[np.argmin(lams[ok])]]),
            int(k[ok[np.argmin(lams[ok])]]),
        )
    )
    if best is None:
        return RejectRule(target, delta, float("nan"), False, 0.0, float("nan"))
    lam, n, k = best
    return RejectRule(target, delta, float(lam), True, n / c.size, k / n)


def write_top1(path: str | Path, splits: dict) -> Path:
    """Write :data:`TOP1_FILE` (atomically) from ``{split: (capture, calibrated probs, labels)}``."""
    import polars as pl

    frames = []
    for split, (cap, probs, labels) in splits.items():
        raw, cal = np.asarray(cap.probs, np.float64), np.asarray(probs, np.float64)
        top1 = cal.argmax(1)
        frames.append(
            pl.DataFrame(
                {
                    "split": [split] * len(labels),
                    "image": [str(p) for p in cap.paths],
                    "label": np.asarray(labels, np.int32),
                    "top1_raw": raw.argmax(1).astype(np.int32),
                    "conf_raw": raw.max(1),
                    "top1": top1.astype(np.int32),
                    "conf": cal.max(1),
                    "right": top1 == np.asarray(labels),
                }
            )
        )
    with atomic_path(path) as tmp:
        pl.concat(frames).write_parquet(tmp)
    return Path(path)


def read_top1(run_dir: str | Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """``(conf, right)`` of ``split``'s images in a classify run's :data:`TOP1_FILE`.

    Raises:
        InputError: No such file (a run written before it existed) or no image of ``split`` in it.
    """
    import polars as pl

    path = Path(run_dir) / TOP1_FILE
    if not path.is_file():
        raise InputError(
            f"{path} not found: this classify run was written before det_calib kept each image's "
            "answer; run `det-calib calibrate` again"
        )
    t = pl.read_parquet(path).filter(pl.col("split") == split)
    if t.height == 0:
        raise InputError(f"{path} holds no image of split `{split}`")
    return t["conf"].to_numpy(), t["right"].to_numpy()
