"""What the report's Conf thresholds section shows of a run's ``thresholds.json``: one view, read once.

:func:`thresholds_view` reads the document (typed: :class:`~det_calib.thresholds.thresholds_file.ThresholdsFile`
and its rows), the criteria in the order they are shown, and per head each class's precision and recall on
the fit and the eval split as the threshold moves over the grid (the curves the section draws, from the run's
boxes and calibrated scores), or why a head has none. The report formats and draws; it reads nothing else
of this folder.

>>> from det_calib.thresholds.report_view import thresholds_view
>>> view = thresholds_view("runs/calib")  # doctest: +SKIP
>>> view.file.heads["nms"].criteria["max_f1"].global_.threshold  # doctest: +SKIP
0.314
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from det_calib.errors import DetCalibError
from det_calib.record.run_result import RunResult
from det_calib.thresholds.criteria import CRITERIA
from det_calib.thresholds.grid_counts import counts_by_image
from det_calib.thresholds.run_head import load_head
from det_calib.thresholds.thresholds_file import ThresholdsFile, read_thresholds

__all__ = ["ClassCurves", "ThresholdsView", "thresholds_view"]

_GRID = np.round(np.arange(1000) / 1000.0, 3)
"""The thresholds the curves are drawn over."""


@dataclass(frozen=True)
class ClassCurves:
    """One class's precision and recall at each threshold of the grid on the fit and the eval split
    (``(precision, recall)`` arrays; None: the split has no figures of the class).

    ``marks``: criterion -> ``(recall, precision, threshold)`` of its chosen threshold on the eval
    split (None: not checked there)."""

    cls: int | None
    name: str
    fit: tuple[np.ndarray, np.ndarray] | None
    eval: tuple[np.ndarray, np.ndarray] | None
    marks: dict[str, tuple[float | None, float | None, float] | None]


@dataclass(frozen=True)
class ThresholdsView:
    """A run folder's tuned thresholds as the report shows them.

    Attributes:
        file: The ``thresholds.json`` document as typed records (heads, criteria, rows, risk control).
        heads: The heads shown, in order.
        criteria: The criteria, in the order the section shows them (target precision, max-F1, LRP).
        curves: Head -> its classes' curves (in the target-precision rows' order), or the one line that
            says why it has none (its boxes could not be read); empty when not asked for.
    """

    file: ThresholdsFile
    heads: list[str]
    criteria: tuple[str, ...] = CRITERIA
    curves: dict[str, list[ClassCurves] | str] = field(default_factory=dict)

    def rows(self, head: str) -> list[tuple[str, dict[str, Any]]]:
        """The table's rows of ``head``: ``("all classes (global)", criterion -> its global row)``,
        then per class (in the target-precision rows' order) its name and criterion -> its row
        (:class:`~det_calib.thresholds.thresholds_file.ThresholdRow`)."""
        crit = self.file.heads[head].criteria
        by_cls = {c: crit[c].by_class() for c in self.criteria}
        return [("all classes (global)", {c: crit[c].global_ for c in self.criteria})] + [
            (r.name, {c: by_cls[c][cls_id] for c in self.criteria})
            for cls_id, r in by_cls["target_precision"].items()
        ]


def thresholds_view(
    run_dir: str | Path,
    *,
    doc: Mapping[str, Any] | ThresholdsFile | None = None,
    heads: Sequence[str] | None = None,
    score: Any = None,
    result: RunResult | None = None,
    curves: bool = True,
) -> ThresholdsView:
    """The view of a run folder's ``thresholds.json``.

    Args:
        run_dir: The run folder (``boxes.parquet``, ``calibration.json``, ``thresholds.json``).
        doc: The thresholds document; default read from ``run_dir/thresholds.json``.
        heads: Heads to show (default every head in the document).
        score: The score used when tuning, if it was not the run's calibrator (see
            :func:`det_calib.thresholds.run_head.tune_run`).
        result: The run's record, when the caller holds it (the run being written); None reads it.
        curves: Whether to read the boxes and compute the curves.

    Raises:
        InputError: No ``thresholds.json``, or one that is not a thresholds file (one line).
    """
    tf = ThresholdsFile.of(read_thresholds(Path(run_dir)) if doc is None else doc)
    shown = list(heads or tf.heads)
    view = ThresholdsView(tf, shown)
    if curves:
        view.curves.update({h: _head_curves(view, run_dir, h, score, result) for h in shown})
    return view


def _head_curves(
    view: ThresholdsView, run_dir: str | Path, head: str, score: Any, result: RunResult | None
) -> list[ClassCurves] | str:
    try:
        rh = load_head(run_dir, head=head, score=score, count_gt=False, result=result)
    except (
        DetCalibError
    ) as e:  # the table stands on its own; the section says why the figure is missing
        return str(e)
    crit = view.file.heads[head].criteria
    by_cls = {c: crit[c].by_class() for c in view.criteria}
    out = []
    for cls_id, r in by_cls["target_precision"].items():
        parts = {}
        for part, df, s, figs in (
            ("fit", rh.fit, rh.fit_score, r.fit),
            ("eval", rh.eval, rh.eval_score, r.eval),
        ):
            if df is None or figs is None:
                parts[part] = None
                continue
            m = df["cls"].to_numpy() == cls_id
            parts[part] = _curve(
                s[m], df["correct"].to_numpy()[m], df["image_id"].to_numpy()[m], int(figs.n_gt or 0)
            )
        marks = {
            c: (row.eval.recall, row.eval.precision, row.threshold) if row.eval else None
            for c in view.criteria
            for row in [by_cls[c][cls_id]]
        }
        out.append(ClassCurves(cls_id, r.name, parts["fit"], parts["eval"], marks))
    return out


def _curve(
    score: np.ndarray, correct: np.ndarray, image_id: np.ndarray, n_gt: int
) -> tuple[np.ndarray, np.ndarray]:
    c = counts_by_image(score, correct, image_id, grid=_GRID, n_gt=n_gt)
    n, k = c.n, c.k
    with np.errstate(invalid="ignore", divide="ignore"):
        prec = np.where(n > 0, k / np.maximum(n, 1), np.nan)
        rec = k / n_gt if n_gt else np.full(len(_GRID), np.nan)
    return prec, rec
