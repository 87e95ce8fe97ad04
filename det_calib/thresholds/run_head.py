"""Thresholds of a calibration run folder: one head's boxes read with their calibrated scores
(:func:`load_head`), tuned and written to ``thresholds.json`` (:func:`tune_run`).
"""

from __future__ import annotations

import datetime as _dt
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.calibrators.base import LogitCalibrator
from det_calib.data.box_view import BoxView, usable_rows
from det_calib.data.ground_truth import load_data_yaml, load_split
from det_calib.errors import InputError
from det_calib.io import write_json
from det_calib.numeric import logit_threshold
from det_calib.record.run_folder import load_run
from det_calib.record.run_result import RunResult, package_version
from det_calib.thresholds.criteria import Fallback, Unit, validate_params
from det_calib.thresholds.grid_counts import check_grid
from det_calib.thresholds.thresholds_file import (
    DEFAULT_TARGET_PRECISION,
    FORMAT,
    THRESHOLDS_FILE,
    VERSION,
    read_thresholds,
)
from det_calib.thresholds.tuning import tune
from det_calib.validation import check_choice

_log = logging.getLogger(__name__)

__all__ = ["HeadTransforms", "RunHead", "ScoreFn", "load_head", "tune_run"]

ScoreFn = Callable[[pl.DataFrame, str], np.ndarray]
HeadTransforms = Mapping[str, Callable[[np.ndarray], np.ndarray]]


def _run_score(calibrator: LogitCalibrator) -> ScoreFn:
    """The score of a run's own calibrator, any method: ``sigmoid`` of the calibrated logit
    (:meth:`BoxView.scored` ``from_logit``)."""

    def score(boxes: pl.DataFrame, head: str) -> np.ndarray:
        return (
            BoxView.from_boxes(boxes, geometry=False, ignore=False)
            .scored(calibrator, from_logit=True)
            .conf
        )

    score.__name__ = "the run's calibrator"
    return score


def _as_score_fn(score: ScoreFn | HeadTransforms) -> ScoreFn:
    if isinstance(score, Mapping):
        transforms = dict(score)

        def from_logits(boxes: pl.DataFrame, head: str) -> np.ndarray:
            if head not in transforms:
                raise InputError(
                    f"Expected a score transform for head {head}, got heads {sorted(transforms)}"
                )
            return np.asarray(
                transforms[head](boxes["logit"].to_numpy().astype(np.float64)), dtype=np.float64
            )

        return from_logits
    if callable(score):
        return score
    raise InputError(
        "Expected argument `score` to be a callable or a mapping head -> callable, got "
        f"{type(score).__name__}"
    )


def _recorded_gt_counts(run: Any, splits: Sequence[str]) -> dict[str, dict[int, int]] | None:
    """Ground-truth counts per class of ``splits`` as the run recorded them (``gt_counts``), or None."""
    recorded = run.gt_counts
    if recorded is None or not all(sp in recorded for sp in splits):
        return None
    return {sp: dict(enumerate(recorded[sp])) for sp in splits}


def _gt_counts(run: Any, cal_path: Path, split: str, n_images: int | None) -> dict[int, int]:
    """Non-crowd ground-truth boxes per class of one split, read from the run's dataset."""

    data = run.data
    if not data or not Path(data).is_file():
        raise InputError(
            f"{cal_path}: the dataset `data` ({data or None}) is not readable; recall, max-F1 and "
            "LRP "
            "need its ground-truth counts (pass `n_gt=` to tune_run)"
        )
    ds = load_data_yaml(data)
    sp = load_split(ds, split, coco_gt=run.settings.coco_gt, limit=n_images)
    gt = sp.gt.filter(~pl.col("crowd"))
    vals, cnt = np.unique(gt["cls"].to_numpy(), return_counts=True)
    return {int(v): int(c) for v, c in zip(vals, cnt)}


@dataclass(frozen=True)
class RunHead:
    """The boxes of one head of a calibration run, with their calibrated scores.

    Attributes:
        run_dir: The run folder.
        head: ``nms`` or ``e2e``.
        class_names: Names indexed by class id.
        fit_split, eval_split: Split names (``eval_split`` None when the run has none).
        fit, eval: Boxes of the head on each split, crowd-ignored boxes dropped (``eval`` None).
        fit_score, eval_score: Their calibrated scores.
        n_gt_fit, n_gt_eval: Ground-truth boxes per class (empty dicts when not counted).
        temperature: The run's temperature of the head (None if absent).
        score_floor: The calibrated score of a box at the capture floor (the run's ``conf_floor``,
            default 0.001): below it the box table is incomplete (with T > 1 the calibrated
            scores of boxes the capture dropped rise above the raw floor), so no threshold is
            chosen under it.
    """

    run_dir: Path
    head: str
    class_names: list[str]
    fit_split: str
    eval_split: str | None
    fit: pl.DataFrame
    eval: pl.DataFrame | None
    fit_score: np.ndarray
    eval_score: np.ndarray | None
    n_gt_fit: dict[int, int]
    n_gt_eval: dict[int, int]
    temperature: float | None
    score_floor: float = 0.0


def load_head(
    run_dir: str | Path,
    *,
    head: str = "nms",
    score: ScoreFn | HeadTransforms | None = None,
    n_gt: Mapping[str, Mapping[int, int]] | None = None,
    count_gt: bool = True,
    result: RunResult | None = None,
) -> RunHead:
    """Read one head of a run folder: boxes of the fit and eval splits and their calibrated scores.

    Reads ``boxes.parquet`` and, from ``calibration.json``, only ``heads``, ``temperature``,
    ``class_names``, ``splits`` and ``gt_counts`` (ground-truth boxes per split and class; a run
    written before that key existed falls back to counting them from ``data``/``coco_gt`` with
    the ``fit``/``eval`` image counts).

    Args:
        run_dir: The output folder of ``det-calib calibrate``.
        head: The head; the run must have it.
        score: See :func:`tune_run`.
        n_gt: ``{split: {class: count}}``; None reads them from ``gt_counts`` (else the run's
            dataset) when ``count_gt`` (else leaves them empty).
        count_gt: Read or count ground truth when ``n_gt`` is None.
        result: The record in memory (the run being written, :meth:`~det_calib.record.run_result.RunResult.as_read`).

    Raises:
        InputError: A file is missing or corrupt, the run lacks the head, no fit boxes.
    """
    run_dir = Path(run_dir)
    cal_path = run_dir / "calibration.json"
    folder = load_run(
        run_dir, result=result
    )  # the one reader of a run folder: one line on a bad file
    run, boxes = folder.result, folder.boxes
    check_choice(head, run.heads, "head", among="the run's heads ")
    temperature = run.temperatures
    names = [str(n) for n in run.class_names]
    fit_split, eval_split = run.settings.fit_split, run.settings.eval_split
    if not fit_split:
        raise InputError(f"{cal_path}: `splits.fit` is missing")
    fit, ev = _head_rows(boxes, run_dir, head=head, fit_split=fit_split, eval_split=eval_split)
    score_fn = _score_fn(folder, cal_path, head, score)
    if n_gt is None and count_gt:
        n_gt = _head_gt_counts(
            run, cal_path, head, fit_split, eval_split if ev is not None else None
        )
    n_gt = n_gt or {}
    t = temperature.get(head)
    score_floor = _score_floor(run, fit, score_fn, head)
    return RunHead(
        run_dir=run_dir,
        head=head,
        class_names=names,
        fit_split=fit_split,
        eval_split=eval_split if ev is not None else None,
        fit=fit,
        eval=ev,
        fit_score=_checked_score(score_fn(fit, head), fit.height, "fit"),
        eval_score=_checked_score(score_fn(ev, head), ev.height, "eval")
        if ev is not None
        else None,
        n_gt_fit={int(k): int(v) for k, v in dict(n_gt.get(fit_split, {})).items()},
        n_gt_eval={int(k): int(v) for k, v in dict(n_gt.get(eval_split, {})).items()}
        if ev is not None
        else {},
        temperature=float(t) if isinstance(t, (int, float)) else None,
        score_floor=score_floor,
    )


def _head_rows(
    boxes: pl.DataFrame, run_dir: Path, *, head: str, fit_split: str, eval_split: str | None
) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """The usable boxes of ``head`` in the fit split, and in the eval split when the run has a distinct
    one (a warning when it has none of them). Raises InputError when the fit split has none."""
    fit = usable_rows(boxes, head=head, split=fit_split)
    ev = (
        usable_rows(boxes, head=head, split=eval_split)
        if eval_split and eval_split != fit_split
        else None
    )
    if ev is not None and ev.height == 0:
        _log.warning(
            "%s: no boxes of head %s in the eval split %s",
            run_dir / "boxes.parquet",
            head,
            eval_split,
        )
    if fit.height == 0:
        raise InputError(
            f"{run_dir / 'boxes.parquet'}: no boxes of head {head} in the fit split `{fit_split}`"
        )
    return fit, ev


def _score_fn(
    folder: Any, cal_path: Path, head: str, score: ScoreFn | HeadTransforms | None
) -> ScoreFn:
    """The score function of ``score`` (see :func:`tune_run`); None: the run's deployed calibrator."""
    if score is not None:
        return _as_score_fn(score)
    cal = folder.deployed_calibrator(head)
    if cal is None:
        raise InputError(f"{cal_path}: no calibrator for head {head}")
    return _run_score(cal)


def _head_gt_counts(
    run: Any, cal_path: Path, head: str, fit_split: str, eval_split: str | None
) -> dict[str, Any]:
    """``{split: {class: count}}`` of the fit split and ``eval_split`` (None: no eval boxes): the
    run's ``gt_counts``, else counted from its dataset."""
    n_gt = _recorded_gt_counts(run, [fit_split, *([eval_split] if eval_split is not None else [])])
    if n_gt is None:  # a run written before calibration.json recorded `gt_counts`
        h = run.head(head)
        n_gt = {fit_split: _gt_counts(run, cal_path, fit_split, _n_images(h.fit))}
        if eval_split is not None:
            n_gt[eval_split] = _gt_counts(run, cal_path, eval_split, _n_images(h.eval))
    return n_gt


def _score_floor(run: Any, fit: pl.DataFrame, score_fn: ScoreFn, head: str) -> float:
    """The calibrated score of the run's capture floor (0.001 when it records none): the highest
    score of one probe box per class at the floor's logit, scored by the same function."""
    floor = run.settings.conf_floor
    floor = float(floor) if isinstance(floor, (int, float)) and 0 < floor < 1 else 0.001
    probe = fit.unique(subset="cls", keep="first").with_columns(
        pl.lit(logit_threshold(floor)).alias("logit"), pl.lit(floor).alias("conf")
    )
    return float(np.max(_checked_score(score_fn(probe, head), probe.height, "floor probe")))


def _checked_score(s: Any, n: int, split: str) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64).reshape(-1)
    if s.shape != (n,):
        raise InputError(
            f"the score function returned {s.shape[0]} scores for {n} boxes of the {split} split"
        )
    if n and (not np.all(np.isfinite(s)) or s.min() < 0 or s.max() > 1):
        raise InputError(f"the score function returned values outside [0, 1] on the {split} split")
    return s


def tune_run(
    run_dir: str | Path,
    *,
    head: str = "nms",
    target_precision: float = DEFAULT_TARGET_PRECISION,
    delta: float = 0.1,
    unit: Unit = "image",
    fallback: Fallback = "global",
    score: ScoreFn | HeadTransforms | None = None,
    score_name: str | None = None,
    n_gt: Mapping[str, Mapping[int, int]] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    grid: np.ndarray | None = None,
    write: bool = True,
    result: RunResult | None = None,
) -> dict[str, Any]:
    """Tune thresholds on a calibration run folder and write ``thresholds.json`` into it.

    Reads the run as :func:`load_head` does (``boxes.parquet`` and a few keys of ``calibration.json``;
    ground truth for recall from ``gt_counts`` when ``n_gt`` is not given). An existing
    ``thresholds.json`` keeps its other heads.

    Args:
        run_dir: The output folder of ``det-calib calibrate``.
        head: ``"nms"`` or ``"e2e"``; the run must have it.
        target_precision, delta, unit, fallback: See :func:`tune`.
        score: Calibrated score of the boxes: None (``sigmoid(logit / temperature[head])``), a
            mapping ``head -> f(logits) -> probabilities``, or a callable ``(boxes, head) -> probabilities``.
        score_name: How the score is described in the file (default from ``score``).
        n_gt: ``{split: {class: ground-truth boxes}}``; default ``gt_counts`` of ``calibration.json``
            (older runs: counted from the run's dataset).
        n_boot, seed: Image-bootstrap resamples of the eval split for the coverage.
        grid: Candidate thresholds.
        write: Write ``thresholds.json`` (atomically). result: As :func:`load_head`.

    Returns:
        The thresholds document (what ``thresholds.json`` holds).

    Raises:
        InputError: Bad parameter, missing/corrupt files, a head the run lacks, no fit boxes.
    """
    validate_params(target_precision, delta, unit, fallback)

    rh = load_head(run_dir, head=head, score=score, n_gt=n_gt, result=result)
    crit = tune(
        rh.fit,
        rh.fit_score,
        n_gt_fit=rh.n_gt_fit,
        class_names=rh.class_names,
        target_precision=target_precision,
        delta=delta,
        unit=unit,
        fallback=fallback,
        eval_boxes=rh.eval,
        eval_score=rh.eval_score,
        n_gt_eval=rh.n_gt_eval,
        n_boot=n_boot,
        seed=seed,
        grid=grid,
        min_threshold=rh.score_floor,
    )
    desc = _score_description(score, score_name, rh.temperature)
    path = rh.run_dir / THRESHOLDS_FILE
    doc = _existing(path) or {}
    doc.update(_document_header(rh))
    doc.setdefault("heads", {})[head] = _head_entry(desc, rh.score_floor, grid, crit)
    if write:
        write_json(path, doc)
    return doc


def _score_description(
    score: ScoreFn | HeadTransforms | None, score_name: str | None, temperature: float | None
) -> dict[str, Any]:
    """How ``thresholds.json`` describes the calibrated score of a head."""
    if score is None and temperature is not None:
        return {"kind": "temperature", "formula": "sigmoid(logit / T)", "temperature": temperature}
    if score is None:
        return {
            "kind": "calibrator",
            "formula": "sigmoid(calibrated logit), the run's calibrator (calibration.json)",
        }
    return {
        "kind": "custom",
        "formula": score_name or getattr(score, "__name__", type(score).__name__),
    }


def _document_header(rh: RunHead) -> dict[str, Any]:
    """The top-level keys of ``thresholds.json`` (every head shares them), stamped now."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "det_calib_version": _version(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "class_names": rh.class_names,
        "splits": {"fit": rh.fit_split, "eval": rh.eval_split},
        "kept_rule": "conf > threshold (strict), conf = the calibrated score",
    }


def _head_entry(
    desc: dict[str, Any], score_floor: float, grid: np.ndarray | None, crit: dict[str, Any]
) -> dict[str, Any]:
    """One head's entry of ``thresholds.json``: its score, floor, candidate grid and criteria."""
    g = check_grid(grid)
    g = g[g >= score_floor]
    return {
        "score": desc,
        "score_floor": score_floor,
        "grid": {"size": int(g.size), "min": float(g[0]), "max": float(g[-1])},
        "criteria": crit,
    }


def _n_images(part: Any) -> int | None:
    """The images a run's fit or eval record counts (its ``--limit``), or None."""
    n = getattr(part, "images", None)
    return int(n) if isinstance(n, int) and n > 0 else None


def _existing(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        doc = read_thresholds(path)
    except InputError as e:
        warnings.warn(f"{path} is replaced: {e}", stacklevel=3)
        return None
    return doc


def _version() -> str:

    return package_version()
