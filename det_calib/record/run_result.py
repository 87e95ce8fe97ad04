"""What one calibration run produces, as typed records, and ``calibration.json``.

The pipeline builds a :class:`RunResult`; :meth:`RunResult.write` writes ``calibration.json`` and
:meth:`RunResult.read` reads it back, checked. The report, ``compare``, ``apply`` and the tests
consume these records, never the raw JSON.

The JSON layout is the one the README documents (per-head values keyed by head under ``fit``,
``eval``, ``threshold_shift``, ``per_class``, ``ultralytics_val``) plus ``schema_version``. JSON
``null`` stands for an undefined number (the precision of an empty set, a metric not computed):
every number of a record may be None.

A head's calibrator is a general :class:`Calibrator` (method name + parameters). For the
temperature method the JSON keeps ``temperature: {head: T}``; any other method is written under
``calibrators: {head: {"method": ..., "params": {...}}}``, and candidate calibrators compared by
cross-validation, when a run has them, under ``calibration_candidates: {head: [...]}``.

Adding a per-head calibration metric: a field of :class:`Scores` and one line of
:meth:`Scores.compute`; its display is one row of the report's metric table.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from det_calib.data.box_table import HEADS
from det_calib.errors import InputError
from det_calib.evaluation.kept_set import ThresholdShift
from det_calib.metrics import calibration as metrics
from det_calib.record.timings import Timings

SCHEMA_VERSION = 1
"""Version of the ``calibration.json`` layout this module writes and reads."""

CALIBRATION_FILE = "calibration.json"

CI = tuple[float, float] | None


def package_version() -> str:
    """The installed det_calib's version (package metadata), or the source tree's when not installed."""
    from importlib import metadata

    try:
        return metadata.version("det_calib")
    except metadata.PackageNotFoundError:  # run from a source checkout (PYTHONPATH)
        from det_calib import __version__

        return __version__


# ----------------------------------------------------------------------------------- checking
def _where(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _number(v: Any, where: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(f"`{where}` must be a number or null, got {v!r}")
    return float(v)


def _integer(v: Any, where: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or float(v) != int(v):
        raise InputError(f"`{where}` must be an integer or null, got {v!r}")
    return int(v)


def _flag(v: Any, where: str) -> bool | None:
    if v is None:
        return None
    if not isinstance(v, bool):
        raise InputError(f"`{where}` must be true, false or null, got {v!r}")
    return v


def _text(v: Any, where: str) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str):
        raise InputError(f"`{where}` must be a string or null, got {v!r}")
    return v


def _interval(v: Any, where: str) -> CI:
    if v is None:
        return None
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise InputError(f"`{where}` must be a [low, high] pair or null, got {v!r}")
    lo, hi = _number(v[0], where), _number(v[1], where)
    return None if lo is None or hi is None else (lo, hi)


def _object(v: Any, where: str, *, optional: bool = True) -> dict[str, Any] | None:
    if v is None and optional:
        return None
    if not isinstance(v, dict):
        raise InputError(f"`{where}` must be an object{' or null' if optional else ''}, got {type(v).__name__}")
    return v


def _items(v: Any, where: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise InputError(f"`{where}` must be a list or null, got {type(v).__name__}")
    return v


_READERS = {float: _number, int: _integer, bool: _flag, str: _text, "ci": _interval}


def _leaf_fields(cls: type, d: dict[str, Any], where: str) -> dict[str, Any]:
    """Read the leaf fields of a flat record (their kind in field metadata ``kind``)."""
    return {f.name: _READERS[f.metadata["kind"]](d.get(f.name), _where(where, f.name))
            for f in dataclasses.fields(cls) if "kind" in f.metadata}


def _leaf(default: Any = None, kind: Any = float) -> Any:
    """A leaf field of a record: its JSON kind (float, int, bool, str) in the metadata."""
    return field(default=default, metadata={"kind": kind})


def _ci_field() -> Any:
    return field(default=None, metadata={"kind": "ci"})


def _plain(v: Any) -> Any:
    """A JSON-ready copy: tuples as lists, numpy scalars as Python numbers."""
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, np.generic):
        return v.item()
    return v


def _leaf_dict(rec: Any) -> dict[str, Any]:
    return {f.name: _plain(getattr(rec, f.name)) for f in dataclasses.fields(rec) if "kind" in f.metadata}


# ------------------------------------------------------------------------------- calibrators
@dataclass(frozen=True)
class Calibrator:
    """A fitted calibration map of one head: a method name and its parameters.

    ``temperature`` (``params = {"temperature": T}``, ``conf = sigmoid(logit / T)``) is what
    :func:`det_calib.run.job.calibrate` fits; other methods carry their own parameters.
    """

    method: str
    params: dict[str, Any]

    @classmethod
    def temperature_scaling(cls, t: float) -> Calibrator:
        return cls("temperature", {"temperature": float(t)})

    @property
    def temperature(self) -> float | None:
        """T of a temperature calibrator, else None."""
        return float(self.params["temperature"]) if self.method == "temperature" else None

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "params": _plain(dict(self.params))}

    @classmethod
    def from_dict(cls, d: Any, where: str = "calibrator") -> Calibrator:
        d = _object(d, where, optional=False)
        method = _text(d.get("method"), _where(where, "method"))
        params = _object(d.get("params"), _where(where, "params"), optional=False)
        if not method:
            raise InputError(f"`{where}.method` must name a calibration method")
        return cls(method, dict(params))


def calibrator_record(cal: Any, method: str, floor: float) -> Calibrator:
    """The :class:`Calibrator` record of a fitted calibrator: the temperature method is
    ``Calibrator("temperature", {"temperature": T})`` (written as ``temperature: {head: T}``, as
    always); any other method is ``Calibrator(method, {"fit_min_conf": floor, "map": cal.to_dict()})``."""
    if method == "temperature":
        return Calibrator.temperature_scaling(float(cal.temperature_))
    return Calibrator(method, {"fit_min_conf": float(floor), "map": cal.to_dict()})


def calibrator_of(rec: Calibrator) -> Any:
    """The fitted calibrator of a record (a :class:`~det_calib.calibrators.base.LogitCalibrator`)."""
    from det_calib.calibrators.registry import calibrator_from_dict, make_calibrator
    from det_calib.calibrators.temperature import TemperatureScaler

    if rec.method == "temperature":
        return TemperatureScaler.of_temperature(float(rec.params["temperature"]))
    if rec.method == "none":
        return make_calibrator("none").fit(None, None)
    m = rec.params.get("map")
    if not isinstance(m, dict):
        raise InputError(f"calibrator {rec.method!r} has no `map` parameters")
    return calibrator_from_dict(m)


@dataclass(frozen=True)
class CVScores:
    """A candidate's cross-validation figures (its record's ``params``; missing ones None): the
    standard error of its CV mean, its paired differences from the best and from ``none`` with
    their standard errors, the shrinkage its CV chose, why it could not be scored, its verdict."""

    se: float | None = None
    diff: float | None = None
    diff_se: float | None = None
    diff_none: float | None = None
    diff_none_se: float | None = None
    shrinkage: float | None = None
    error: str | None = None
    verdict: str | None = None

    @classmethod
    def of(cls, params: dict[str, Any]) -> CVScores:
        p = params
        return cls(p.get("cv_se"), p.get("cv_diff"), p.get("cv_diff_se"), p.get("cv_diff_none"),
                   p.get("cv_diff_none_se"), p.get("shrinkage"), p.get("error"), p.get("verdict"))


@dataclass(frozen=True)
class CandidateEval:
    """A candidate's all-box figures on the eval split (missing ones None)."""

    ece_all: float | None = None
    ece_all_ci: Any = None
    nll: float | None = None
    brier: float | None = None
    class_kept_ece: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, d: dict[str, Any] | None) -> CandidateEval:
        d = d or {}
        return cls(d.get("ece_all"), d.get("ece_all_ci"), d.get("nll"), d.get("brier"),
                   dict(d.get("class_kept_ece") or {}))


@dataclass(frozen=True)
class Candidate:
    """A calibrator considered for a head, with its cross-validated score (lower is better)."""

    calibrator: Calibrator
    cv_score: float | None = None
    selected: bool = False
    eval: dict[str, Any] | None = None
    """Figures of the candidate refitted on the whole fit split, on the eval split (``operating``:
    a list of :class:`OperatingFigures` dicts; ``ece_all``, ``ece_all_ci``, ``nll``, ``brier``;
    ``class_kept_ece``: class id -> kept-set ECE at the lowest threshold). Only the best fit range
    of each method is evaluated."""

    def to_dict(self) -> dict[str, Any]:
        out = {**self.calibrator.to_dict(), "cv_score": self.cv_score, "selected": self.selected}
        if self.eval is not None:
            out["eval"] = _plain(self.eval)
        return out

    @classmethod
    def from_dict(cls, d: Any, where: str) -> Candidate:
        d = _object(d, where, optional=False)
        return cls(Calibrator.from_dict(d, where), _number(d.get("cv_score"), _where(where, "cv_score")),
                   bool(_flag(d.get("selected"), _where(where, "selected"))),
                   _object(d.get("eval"), _where(where, "eval")))

    @property
    def fit_min_conf(self) -> float | None:
        v = self.calibrator.params.get("fit_min_conf")
        return float(v) if isinstance(v, (int, float)) else None

    @property
    def name(self) -> str:
        """``method@floor`` (``none`` alone)."""
        f = self.fit_min_conf
        m = self.calibrator.method
        return m if m == "none" or f is None else f"{m}@{f:g}"

    def operating(self) -> list[OperatingFigures]:
        return [OperatingFigures.from_dict(o, "eval.operating") for o in (self.eval or {}).get("operating", [])]

    @property
    def cv(self) -> CVScores:
        """Its cross-validation figures, typed."""
        return CVScores.of(self.calibrator.params)

    @property
    def eval_figures(self) -> CandidateEval:
        """Its all-box figures on the eval split, typed (all None when it was not scored there)."""
        return CandidateEval.of(self.eval)


def _temperature_ok(t: float | None) -> bool:
    return t is not None and math.isfinite(t) and t > 0


T_CLOSE = math.log(1.02)
"""|log T| below this counts as "close to calibrated" (T within about 2% of 1)."""


WORSE_TOLERANCE = 1e-6
"""A calibrated kept-set ECE above the raw one by less than this is rounding, not "worse"."""


def operating_point_worse(e: EvalResult) -> str | None:
    """Why the calibrated scores are worse than the raw ones where decisions are made (a higher ECE
    of the boxes kept at the lowest conf threshold on the eval split), or None. The CLI summary
    and the report both say it. Differences below ``WORSE_TOLERANCE`` are rounding (the raw scores
    are read from the stored float32 conf, the calibrated ones from the float64 logits: ``none``
    differs from the raw scores by ~1e-11) and do not count."""
    if not e.operating_before or not e.operating_after:
        return None
    o0, o1 = e.operating_before[0], e.operating_after[0]
    if o0.ece is None or o1.ece is None or not o1.ece > o0.ece + WORSE_TOLERANCE:
        return None
    return f"ECE of the boxes kept at conf {o0.conf:g}: {o0.ece:.4f} raw, {o1.ece:.4f} calibrated"


def left_words(h: HeadResult, e: EvalResult) -> str | None:
    """What is left when the calibrated kept set is still above its sampling floor's range: which
    scores (the bins with the largest terms of its ECE) and which classes (the worst kept-set ECE);
    None when it is within the range (or unknown). The summary and the report both say it."""
    if not e.operating_after:
        return None
    o1 = e.operating_after[0]
    if o1.ece is None or o1.ece_floor_range is None or o1.at_floor:
        return None
    gaps = "; ".join(
        f"conf {g.lo:.2f}-{g.hi:.2f} ({g.boxes} boxes: {_fmt(g.conf, '.2f')} stated, {_fmt(g.accuracy, '.2f')} "
        f"correct, {'over' if (g.accuracy or 0) < (g.conf or 0) else 'under'}-confident; {_fmt(g.share, '.4f')} "
        "of the ECE)" for g in e.kept_gaps if g.lo is not None and g.hi is not None)
    worst = sorted((c for c in h.per_class if c.kept_ece_after is not None and not c.few_boxes),
                   key=lambda c: -c.kept_ece_after)[:2]
    classes = ", ".join(f"{c.name} {c.kept_ece_after:.3f}" for c in worst)
    return (f"what is left at conf {o1.conf:g}: ECE {_fmt(o1.ece, '.4f')} is above what a perfectly calibrated "
            f"detector would score on these boxes (up to {_fmt(o1.ece_floor_range[1], '.4f')})"
            + (f"; the largest gaps: {gaps}" if gaps else "")
            + (f"; worst classes (kept-set ECE): {classes}" if classes else ""))


def temperature_words(tf: TemperatureFit | None) -> str | None:
    """The temperature every run fits, in words: T and, when it is not deployed, what it would give."""
    if tf is None:
        return None
    what = f"T = {tf.temperature:.4f} (raw scores {temperature_verdict(tf.temperature)})"
    if tf.deployed:
        return f"temperature (fitted on all fit boxes): {what}; it is the deployed map"
    op = tf.operating[0] if tf.operating else None
    kept = ""
    if op is not None:
        ci = "" if not op.ece_ci else f" [{_fmt(op.ece_ci[0], '.4f')}, {_fmt(op.ece_ci[1], '.4f')}]"
        kept = (f"; deployed instead, its ECE of the boxes kept at conf {op.conf:g} would be "
                f"{_fmt(op.ece, '.4f')}{ci} ({op.boxes} boxes)")
    return f"temperature (fitted on all fit boxes, for comparison): {what}{kept}"


def _fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def temperature_verdict(t: float | None, *, long: bool = False) -> str:
    """A few words for a temperature: too extreme (T > 1), too timid (T < 1), close to calibrated.

    Not "over-/under-confident": T > 1 means the raw scores sit too close to 0 and 1, which is
    over-confidence for high scores but under-confidence for the many low ones (and vice versa).
    ``long`` adds what the words mean. The report and the CLI's summary both use it.
    """
    if t is None:
        return "not fitted"
    if abs(math.log(t)) < T_CLOSE:
        return "close to calibrated" + (": T within 2% of 1" if long else "")
    if t > 1:
        return "too extreme" + (": too close to 0 and 1" if long else "")
    return "too timid" + (": too close to 0.5" if long else "")


# ------------------------------------------------------------------------------------ records
@dataclass(frozen=True)
class Scores:
    """Calibration metrics of one set of scores (raw or calibrated) on the evaluation split.

    In the JSON each field ``m`` is the key ``m_before`` / ``m_after`` (``m_ci``:
    ``m_before_ci`` / ``m_after_ci``), a 95% image-bootstrap interval ``[low, high]``.
    """

    ece: float | None = _leaf()
    ece_ci: CI = _ci_field()
    ace: float | None = _leaf()
    mce: float | None = _leaf()
    nll: float | None = _leaf()
    brier: float | None = _leaf()
    dece: float | None = _leaf()
    laece: float | None = _leaf()
    laece_ci: CI = _ci_field()
    laace: float | None = _leaf()

    @classmethod
    def compute(
        cls,
        conf: np.ndarray,
        correct: np.ndarray,
        *,
        logit: np.ndarray,
        temperature: float,
        loc_iou: np.ndarray,
        cls_id: np.ndarray,
        features: np.ndarray,
        image_id: np.ndarray,
        ece_bins: int,
        laece_bins: int,
        dece_bins: list[int],
        n_boot: int,
        seed: int,
    ) -> Scores:
        """Every metric of ``conf`` (shape (n,)) against ``correct`` (n,).

        ``logit / temperature`` gives the NLL without the precision lost in ``conf``; ``loc_iou``
        (n,) and ``cls_id`` (n,) feed LaECE / LaACE, ``features`` (n, 4) D-ECE; intervals resample
        ``image_id`` (n,).
        """
        boot = dict(n_boot=n_boot, seed=seed)
        ece_fn = functools.partial(metrics.ece, n_bins=ece_bins)  # keeps `weights`: fast bootstrap path
        laece_fn = functools.partial(metrics.laece, n_bins=laece_bins)
        p, y = conf, correct
        return cls(
            ece=metrics.ece(p, y, n_bins=ece_bins),
            ece_ci=tuple(metrics.bootstrap_ci(ece_fn, image_id, p, y, **boot)),
            ace=metrics.ace(p, y, n_bins=ece_bins),
            mce=metrics.mce(p, y, n_bins=ece_bins),
            nll=metrics.nll_logits(logit, y, temperature=temperature),
            brier=metrics.brier(p, y),
            dece=metrics.dece(p, y, features, n_bins=list(dece_bins)),
            laece=metrics.laece(p, loc_iou, cls_id, n_bins=laece_bins),
            laece_ci=tuple(metrics.bootstrap_ci(laece_fn, image_id, p, loc_iou, cls_id, **boot)),
            laace=metrics.laace(p, loc_iou, cls_id),
        )

    @staticmethod
    def key(name: str, tag: str) -> str:
        """JSON key of field ``name`` for ``tag`` (``before``/``after``): ``ece_before``, ``ece_before_ci``."""
        return f"{name[:-3]}_{tag}_ci" if name.endswith("_ci") else f"{name}_{tag}"

    def to_flat(self, tag: str) -> dict[str, Any]:
        return {self.key(f.name, tag): _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_flat(cls, d: dict[str, Any], tag: str, where: str) -> Scores:
        return cls(**{f.name: _READERS[f.metadata["kind"]](d.get(k), _where(where, k))
                      for f in dataclasses.fields(cls) for k in [cls.key(f.name, tag)]})


@dataclass(frozen=True)
class OperatingFigures:
    """Calibration of the boxes kept at one conf threshold (``conf > threshold``), one set of scores.

    ``ece``: ECE (equal-width bins) of the kept boxes against the matched flag; ``laece0``: LaECE_0
    with the reference toolkit's conventions (:func:`det_calib.metrics.operating_point.laece0`). Intervals: 95%
    bootstrap over images (:func:`det_calib.metrics.bootstrap_ci`): ``ece_ci`` bias-corrected
    percentile, ``laece0_ci`` normal (estimate -+ 1.96 SD; see :class:`det_calib.run.fitting.OperatingEval`).
    ``ece_floor``: the sampling floor of ``ece``, the mean kept-set ECE a perfectly calibrated
    detector would score on the same kept boxes (labels drawn from their confidences,
    :func:`det_calib.metrics.operating_point.kept_ece_floor`); ``ece_floor_range`` its 95% range. An ``ece``
    inside that range is as low as this many boxes can show.
    """

    conf: float | None = _leaf()
    boxes: int | None = _leaf(kind=int)
    correct: int | None = _leaf(kind=int)
    ece: float | None = _leaf()
    ece_ci: CI = _ci_field()
    laece0: float | None = _leaf()
    laece0_ci: CI = _ci_field()
    ece_floor: float | None = _leaf()
    ece_floor_range: CI = _ci_field()

    @property
    def at_floor(self) -> bool | None:
        """Whether ``ece`` lies within the 95% range of a perfectly calibrated detector (None: unknown)."""
        if self.ece is None or self.ece_floor_range is None:
            return None
        return self.ece <= self.ece_floor_range[1]

    def to_dict(self) -> dict[str, Any]:
        return _leaf_dict(self)

    @classmethod
    def from_dict(cls, d: Any, where: str) -> OperatingFigures:
        return cls(**_leaf_fields(cls, _object(d, where, optional=False), where))


@dataclass(frozen=True)
class TemperatureFit:
    """The temperature of a head fitted on every box of the fit split, whatever was deployed.

    Temperature scaling is the classic method and what users compare with, so every run fits
    it and reports it (``temperature_fit`` in ``calibration.json``): ``temperature`` (T),
    ``deployed`` (whether it is the head's calibrator), ``operating`` (its kept-set figures on
    the eval split, as ``operating_after``), ``nll`` (its all-box NLL on the eval split).
    """

    temperature: float
    deployed: bool = False
    operating: list[OperatingFigures] = field(default_factory=list)
    nll: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "deployed": self.deployed,
                "operating": [o.to_dict() for o in self.operating], "nll": _plain(self.nll)}

    @classmethod
    def from_dict(cls, d: Any, where: str) -> TemperatureFit | None:
        d = _object(d, where)
        if d is None:
            return None
        t = _number(d.get("temperature"), _where(where, "temperature"))
        if not _temperature_ok(t):
            raise InputError(f"`{_where(where, 'temperature')}` must be a positive number, "
                             f"got {d.get('temperature')!r}")
        return cls(temperature=float(t), deployed=bool(_flag(d.get("deployed"), _where(where, "deployed"))),
                   operating=[OperatingFigures.from_dict(o, f"{_where(where, 'operating')}[{i}]")
                              for i, o in enumerate(_items(d.get("operating"), _where(where, "operating")))],
                   nll=_number(d.get("nll"), _where(where, "nll")))


@dataclass(frozen=True)
class Thresholded:
    """ECE of the boxes kept at one conf threshold, raw and calibrated."""

    conf: float | None = _leaf()
    boxes_before: int | None = _leaf(kind=int)
    ece_before: float | None = _leaf()
    boxes_after: int | None = _leaf(kind=int)
    ece_after: float | None = _leaf()


@dataclass(frozen=True)
class FitResult:
    """The temperature fit of one head, with the fit split's own (in-sample) figures."""

    split: str | None = _leaf(kind=str)
    images: int | None = _leaf(kind=int)
    boxes: int | None = _leaf(kind=int)
    correct: int | None = _leaf(kind=int)
    nll_before: float | None = _leaf()
    nll_after: float | None = _leaf()
    ece_before: float | None = _leaf()
    ece_after: float | None = _leaf()
    brier_before: float | None = _leaf()
    brier_after: float | None = _leaf()
    iterations: int | None = _leaf(kind=int)


@dataclass(frozen=True)
class BinGap:
    """One confidence bin of the calibrated kept set and its share of the kept-set ECE.

    ``lo``/``hi``: the bin's conf range; ``boxes`` in it; ``conf``: their mean calibrated conf;
    ``accuracy``: the fraction correct; ``share``: ``boxes / kept * |accuracy - conf|``, its term
    of the kept-set ECE (the terms add up to the ECE).
    """

    lo: float | None = _leaf()
    hi: float | None = _leaf()
    boxes: int | None = _leaf(kind=int)
    conf: float | None = _leaf()
    accuracy: float | None = _leaf()
    share: float | None = _leaf()


@dataclass(frozen=True)
class EvalResult:
    """One head on the evaluation split: counts, metrics raw and calibrated, mAP check."""

    split: str | None = _leaf(kind=str)
    images: int | None = _leaf(kind=int)
    boxes: int | None = _leaf(kind=int)
    correct: int | None = _leaf(kind=int)
    ignored: int | None = _leaf(kind=int)
    n_gt: int | None = _leaf(kind=int)
    corrupt_images: int | None = _leaf(kind=int)
    before: Scores = field(default_factory=Scores)
    after: Scores = field(default_factory=Scores)
    thresholded: list[Thresholded] = field(default_factory=list)
    operating_before: list[OperatingFigures] = field(default_factory=list)
    operating_after: list[OperatingFigures] = field(default_factory=list)
    map50_95_before: float | None = _leaf()
    map50_95_after: float | None = _leaf()
    map50_before: float | None = _leaf()
    map50_after: float | None = _leaf()
    map_identical: bool | None = _leaf(kind=bool)
    map_engine: str | None = _leaf(kind=str)
    """What scored the mAP figures: ``det_calib`` (:mod:`det_calib.evaluation.coco_engine`) or ``pycocotools``
    (None in runs written before the choice existed: pycocotools)."""
    kept_gaps: list[BinGap] = field(default_factory=list)
    """The bins of the calibrated boxes kept at the lowest conf threshold with the largest terms
    of their ECE, largest first (``kept_gaps_after`` in the JSON): where the error that is left lies."""

    def scores(self, tag: str) -> Scores:
        return self.before if tag == "before" else self.after

    def to_dict(self) -> dict[str, Any]:
        leaf = _leaf_dict(self)
        out = {k: leaf[k] for k in ("split", "images", "boxes", "correct", "ignored", "n_gt", "corrupt_images")}
        out.update(self.before.to_flat("before"))
        out.update(self.after.to_flat("after"))
        out["thresholded"] = [_leaf_dict(t) for t in self.thresholded]
        if self.operating_before or self.operating_after:
            out["operating_before"] = [o.to_dict() for o in self.operating_before]
            out["operating_after"] = [o.to_dict() for o in self.operating_after]
        out.update({k: leaf[k] for k in ("map50_95_before", "map50_95_after", "map50_before", "map50_after",
                                         "map_identical")})
        if self.map_engine is not None:
            out["map_engine"] = self.map_engine
        if self.kept_gaps:
            out["kept_gaps_after"] = [_leaf_dict(g) for g in self.kept_gaps]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> EvalResult:
        return cls(
            **_leaf_fields(cls, d, where),
            before=Scores.from_flat(d, "before", where),
            after=Scores.from_flat(d, "after", where),
            thresholded=[Thresholded(**_leaf_fields(Thresholded, _object(t, w, optional=False), w))
                         for i, t in enumerate(_items(d.get("thresholded"), _where(where, "thresholded")))
                         for w in [f"{where}.thresholded[{i}]"]],
            **{k: [OperatingFigures.from_dict(o, f"{where}.{k}[{i}]")
                   for i, o in enumerate(_items(d.get(k), _where(where, k)))]
               for k in ("operating_before", "operating_after")},
            kept_gaps=[BinGap(**_leaf_fields(BinGap, _object(g, w, optional=False), w))
                       for i, g in enumerate(_items(d.get("kept_gaps_after"), _where(where, "kept_gaps_after")))
                       for w in [f"{where}.kept_gaps_after[{i}]"]],
        )


def _shift_from_dict(d: Any, where: str) -> ThresholdShift:
    d = _object(d, where, optional=False)
    kinds = {"n_gt": int, "kept_before": int, "kept_after": int, "added": int, "added_correct": int,
             "removed": int, "removed_correct": int}
    return ThresholdShift(**{f.name: _READERS[kinds.get(f.name, float)](d.get(f.name), _where(where, f.name))
                             for f in dataclasses.fields(ThresholdShift)})


def _shifts(v: Any, where: str) -> list[ThresholdShift]:
    return [_shift_from_dict(x, f"{where}[{i}]") for i, x in enumerate(_items(v, where))]


@dataclass(frozen=True)
class ClassResult:
    """One class on the evaluation split (None metrics: the class has ground truth but no box)."""

    cls: int | None = _leaf(kind=int)
    name: str | None = _leaf(kind=str)
    boxes: int | None = _leaf(kind=int)
    correct: int | None = _leaf(kind=int)
    n_gt: int | None = _leaf(kind=int)
    few_boxes: bool | None = _leaf(kind=bool)
    ece_before: float | None = _leaf()
    ece_before_ci: CI = _ci_field()
    laece_before: float | None = _leaf()
    ece_after: float | None = _leaf()
    ece_after_ci: CI = _ci_field()
    laece_after: float | None = _leaf()
    kept_ece_before: float | None = _leaf()
    kept_ece_after: float | None = _leaf()
    threshold_shift: list[ThresholdShift] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**_leaf_dict(self), "threshold_shift": [s.to_dict() for s in self.threshold_shift]}

    @classmethod
    def from_dict(cls, d: Any, where: str) -> ClassResult:
        d = _object(d, where, optional=False)
        return cls(**_leaf_fields(cls, d, where),
                   threshold_shift=_shifts(d.get("threshold_shift"), _where(where, "threshold_shift")))


@dataclass(frozen=True)
class ValMap:
    """Ultralytics ``model.val()`` mAP of one checkpoint at one conf floor."""

    conf: float | None = _leaf()
    map50_95: float | None = _leaf()
    map50: float | None = _leaf()


@dataclass(frozen=True)
class ValCheck:
    """Ultralytics val of the original and the calibrated checkpoint (None: not run).

    ``completed`` is False for a pass that could not be completed (Ultralytics' NMS reached its
    time limit and dropped boxes, :class:`det_calib.evaluation.map_check.ValIncomplete`): it then holds no mAP,
    and ``note`` says why. None otherwise (and in runs written before the field existed).
    """

    split: str | None = _leaf(kind=str)
    original: ValMap | None = None
    calibrated: ValMap | None = None
    calibrated_equivalent_floor: ValMap | None = None
    identical_at_equivalent_floor: bool | None = _leaf(kind=bool)
    note: str | None = _leaf(kind=str)
    completed: bool | None = _leaf(kind=bool)

    @property
    def ran(self) -> bool:
        return self.original is not None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"split": self.split}
        for k in ("original", "calibrated", "calibrated_equivalent_floor"):
            v = getattr(self, k)
            out[k] = None if v is None else _leaf_dict(v)
        if self.identical_at_equivalent_floor is not None:
            out["identical_at_equivalent_floor"] = self.identical_at_equivalent_floor
        if self.completed is False:
            out["completed"] = False
        out["note"] = self.note
        return out

    @classmethod
    def from_dict(cls, d: Any, where: str) -> ValCheck | None:
        d = _object(d, where)
        if d is None:
            return None
        maps = {}
        for k in ("original", "calibrated", "calibrated_equivalent_floor"):
            m = _object(d.get(k), _where(where, k))
            maps[k] = None if m is None else ValMap(**_leaf_fields(ValMap, m, _where(where, k)))
        return cls(**_leaf_fields(cls, d, where), **maps)


@dataclass(frozen=True)
class DetectionChange:
    """A per-class map folded into the model, measured: its detections against the original
    model's boxes rescored post-hoc by the same map (what the fold would give if it changed no
    box). Boxes are the same when image, class and coordinates (to 0.01 px) agree.

    ``changed_class``: boxes output by both with another class; ``only_posthoc`` / ``only_folded``:
    boxes one side has and the other lacks (top-k and conf-floor effects, class changes
    included), compared above ``conf_floor``: the highest calibrated conf any class's raw capture
    floor maps to (below it the original capture lacks boxes the folded model may output);
    ``kept_*``: the same counts among boxes above ``kept_conf``. ``map*``: pycocotools
    on the eval split: original model raw, post-hoc rescored, folded model.
    """

    split: str | None = _leaf(kind=str)
    conf_floor: float | None = _leaf()
    boxes_posthoc: int | None = _leaf(kind=int)
    boxes_folded: int | None = _leaf(kind=int)
    changed_class: int | None = _leaf(kind=int)
    only_posthoc: int | None = _leaf(kind=int)
    only_folded: int | None = _leaf(kind=int)
    kept_conf: float | None = _leaf()
    kept_posthoc: int | None = _leaf(kind=int)
    kept_folded: int | None = _leaf(kind=int)
    kept_only_posthoc: int | None = _leaf(kind=int)
    kept_only_folded: int | None = _leaf(kind=int)
    map50_95_original: float | None = _leaf()
    map50_95_posthoc: float | None = _leaf()
    map50_95_folded: float | None = _leaf()
    map50_original: float | None = _leaf()
    map50_posthoc: float | None = _leaf()
    map50_folded: float | None = _leaf()

    @property
    def identical(self) -> bool:
        return self.only_posthoc == 0 and self.only_folded == 0 and self.changed_class == 0


@dataclass(frozen=True)
class HeadResult:
    """Everything a run found for one head."""

    calibrator: Calibrator | None = None
    fit: FitResult | None = None
    eval: EvalResult | None = None
    threshold_shift: list[ThresholdShift] = field(default_factory=list)
    per_class: list[ClassResult] = field(default_factory=list)
    ultralytics_val: ValCheck | None = None
    candidates: list[Candidate] | None = None
    detection_change: DetectionChange | None = None
    temperature_fit: TemperatureFit | None = None

    @property
    def temperature(self) -> float | None:
        return None if self.calibrator is None else self.calibrator.temperature

    @property
    def fit_floor(self) -> float | None:
        """The raw conf floor the deployed calibrator was fitted above (0.0: every box): its own
        record's, else (a temperature, whose record is T alone) the selected candidate's; None: unknown."""
        v = None if self.calibrator is None else self.calibrator.params.get("fit_min_conf")
        if isinstance(v, (int, float)):
            return float(v)
        chosen = next((c for c in self.candidates or [] if c.selected), None)
        return None if chosen is None else chosen.fit_min_conf


@dataclass(frozen=True)
class Bootstrap:
    """Settings of the bootstrap intervals (resampling unit: image)."""

    n_boot: int = 1000
    seed: int = 0
    level: float = 0.95
    unit: str = "image"


@dataclass(frozen=True)
class RecordedSettings:
    """The settings a run records in ``calibration.json`` (top-level keys of the same names)."""

    iou_match: float
    loc_iou_match: float
    fit_min_conf: float | None
    conf_floor: float
    nms_iou: float
    max_det: int
    imgsz: int | None
    conf_thresholds: tuple[float, ...]
    ece_bins: int
    laece_bins: int
    dece_bins: tuple[int, ...]
    min_class_boxes: int
    bootstrap: Bootstrap
    fit_split: str | None
    eval_split: str | None
    coco_gt: str | None
    method: str = "temperature"
    fit_range: str | None = None
    criterion: str | None = None
    cv_folds: int | None = None
    cv_repeats: int | None = None
    auto_per_class: bool | None = None

    _KINDS = {"iou_match": float, "loc_iou_match": float, "fit_min_conf": float, "conf_floor": float,
              "nms_iou": float, "max_det": int, "imgsz": int, "ece_bins": int, "laece_bins": int,
              "min_class_boxes": int}

    def to_dict(self) -> dict[str, Any]:
        return {
            "iou_match": self.iou_match, "loc_iou_match": self.loc_iou_match, "fit_min_conf": self.fit_min_conf,
            "conf_floor": self.conf_floor, "nms_iou": self.nms_iou, "max_det": self.max_det, "imgsz": self.imgsz,
            "conf_thresholds": list(self.conf_thresholds), "ece_bins": self.ece_bins,
            "laece_bins": self.laece_bins, "dece_bins": list(self.dece_bins),
            "min_class_boxes": self.min_class_boxes, "bootstrap": dataclasses.asdict(self.bootstrap),
            "splits": {"fit": self.fit_split, "eval": self.eval_split}, "coco_gt": self.coco_gt,
            "method": self.method, "fit_range": self.fit_range, "criterion": self.criterion,
            "cv_folds": self.cv_folds, "cv_repeats": self.cv_repeats, "auto_per_class": self.auto_per_class,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> RecordedSettings:
        vals: dict[str, Any] = {}
        for k, kind in cls._KINDS.items():
            v = _READERS[kind](d.get(k), _where(where, k))
            if v is None and k not in ("imgsz", "fit_min_conf"):
                raise InputError(f"`{_where(where, k)}` is missing")
            vals[k] = v
        conf = [_number(x, f"{_where(where, 'conf_thresholds')}[{i}]")
                for i, x in enumerate(_items(d.get("conf_thresholds"), _where(where, "conf_thresholds")))]
        dece = [_integer(x, f"{_where(where, 'dece_bins')}[{i}]")
                for i, x in enumerate(_items(d.get("dece_bins"), _where(where, "dece_bins")))]
        b = _object(d.get("bootstrap"), _where(where, "bootstrap")) or {}
        bw = _where(where, "bootstrap")
        boot = Bootstrap(
            n_boot=_integer(b.get("n_boot"), bw + ".n_boot") or Bootstrap.n_boot,
            seed=_integer(b.get("seed"), bw + ".seed") or 0,
            level=_number(b.get("level"), bw + ".level") or Bootstrap.level,
            unit=_text(b.get("unit"), bw + ".unit") or Bootstrap.unit,
        )
        sp = _object(d.get("splits"), _where(where, "splits")) or {}
        return cls(**vals, conf_thresholds=tuple(c for c in conf if c is not None),
                   dece_bins=tuple(x for x in dece if x is not None), bootstrap=boot,
                   fit_split=_text(sp.get("fit"), _where(where, "splits.fit")),
                   eval_split=_text(sp.get("eval"), _where(where, "splits.eval")),
                   coco_gt=_text(d.get("coco_gt"), _where(where, "coco_gt")),
                   method=_text(d.get("method"), _where(where, "method")) or "temperature",
                   fit_range=_text(d.get("fit_range"), _where(where, "fit_range")),
                   criterion=_text(d.get("criterion"), _where(where, "criterion")),
                   cv_folds=_integer(d.get("cv_folds"), _where(where, "cv_folds")),
                   cv_repeats=_integer(d.get("cv_repeats"), _where(where, "cv_repeats")),
                   auto_per_class=_flag(d.get("auto_per_class"), _where(where, "auto_per_class")))


_PER_HEAD = ("fit", "eval", "threshold_shift", "per_class", "ultralytics_val")


@dataclass
class RunResult:
    """One calibration run: what went in, the settings, and a :class:`HeadResult` per head.

    Attributes:
        model, data: Absolute paths of the checkpoint and the ``data.yaml``.
        class_names: Class names, index = class id.
        heads: Heads calibrated, in order (``"nms"``, ``"e2e"``).
        settings: The recorded settings.
        results: Head -> its results.
        corrupt_images: Image files skipped as unreadable.
        det_calib_version, created, seconds: Version that wrote the run, ISO time, run time.
        gt_counts: Split -> non-crowd ground-truth boxes per class id (a list indexed by class id),
            for the fit and the eval split; None in runs written before the key existed.
        ensemble: For a ``det-calib ensemble`` run, its members, fusion settings and figures
            (:class:`det_calib.record.ensemble_record.EnsembleRecord`); None for one detector.
    """

    model: str
    data: str
    class_names: list[str]
    heads: list[str]
    settings: RecordedSettings
    results: dict[str, HeadResult]
    corrupt_images: list[str] = field(default_factory=list)
    det_calib_version: str = ""
    created: str | None = None
    seconds: float | None = None
    schema_version: int = SCHEMA_VERSION
    gt_counts: dict[str, list[int]] | None = None
    ensemble: Any = None
    bad_labels: list[str] = field(default_factory=list)
    """``"<file>:<line>: <reason>"`` of every malformed label file whose image was left out (written
    only when there are some; the warnings name the first few)."""
    timings: Timings | None = None
    """Wall and CPU seconds per stage of the command that wrote the run (None in runs written before)."""

    @property
    def temperatures(self) -> dict[str, float]:
        """Head -> T, for the heads calibrated by a temperature."""
        return {h: r.temperature for h, r in self.results.items() if r.temperature is not None}

    def head(self, head: str) -> HeadResult:
        return self.results.get(head) or HeadResult()

    def class_name(self, c: int) -> str:
        return self.class_names[c] if 0 <= c < len(self.class_names) else str(c)

    # ---------------------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        """The ``calibration.json`` object."""
        res = {h: self.head(h) for h in self.heads}
        out: dict[str, Any] = {
            "schema_version": self.schema_version,
            "det_calib_version": self.det_calib_version,
            "created": self.created,
            "model": self.model,
            "data": self.data,
            "class_names": list(self.class_names),
            "heads": list(self.heads),
            "temperature": {h: r.temperature for h, r in res.items()
                            if r.calibrator is None or r.temperature is not None},
        }
        others = {h: r.calibrator.to_dict() for h, r in res.items()
                  if r.calibrator is not None and r.temperature is None}
        if others:
            out["calibrators"] = others
        out.update(self.settings.to_dict())
        out["fit"] = {h: _leaf_dict(r.fit) for h, r in res.items() if r.fit is not None}
        out["eval"] = {h: r.eval.to_dict() for h, r in res.items() if r.eval is not None}
        out["threshold_shift"] = {h: [s.to_dict() for s in r.threshold_shift] for h, r in res.items()}
        out["per_class"] = {h: [c.to_dict() for c in r.per_class] for h, r in res.items()}
        out["ultralytics_val"] = {h: r.ultralytics_val.to_dict() for h, r in res.items()
                                  if r.ultralytics_val is not None}
        cands = {h: [c.to_dict() for c in r.candidates] for h, r in res.items() if r.candidates}
        if cands:
            out["calibration_candidates"] = cands
        changes = {h: _leaf_dict(r.detection_change) for h, r in res.items() if r.detection_change is not None}
        if changes:
            out["detection_change"] = changes
        tfits = {h: r.temperature_fit.to_dict() for h, r in res.items() if r.temperature_fit is not None}
        if tfits:
            out["temperature_fit"] = tfits
        out["corrupt_images"] = list(self.corrupt_images)
        if self.bad_labels:
            out["bad_labels"] = list(self.bad_labels)
        if self.gt_counts is not None:
            out["gt_counts"] = {sp: [int(n) for n in v] for sp, v in self.gt_counts.items()}
        if self.seconds is not None:
            out["seconds"] = self.seconds
        if self.ensemble is not None:
            out["ensemble"] = self.ensemble.to_dict()
        if self.timings is not None:
            out["timings"] = self.timings.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Any) -> RunResult:
        """Check and read a ``calibration.json`` object.

        A file without ``schema_version`` is read as version 1 (the same layout, written before
        the field existed); any other version is refused.

        Raises:
            InputError: Another schema version, a missing or mistyped field (one line naming it).
        """
        _check_version(d)
        heads = d.get("heads")
        if not isinstance(heads, list) or not heads or not all(h in HEADS for h in heads):
            raise InputError(f"`heads` must be a non-empty list of {list(HEADS)}, got {heads!r}")
        calibrators = calibrators_from_dict(d, heads)
        cands = _object(d.get("calibration_candidates"), "calibration_candidates") or {}
        changes = _object(d.get("detection_change"), "detection_change") or {}
        tfits = _object(d.get("temperature_fit"), "temperature_fit") or {}
        sections = {k: _object(d.get(k), k) or {} for k in _PER_HEAD}
        results = {}
        for h in heads:
            fit = _object(sections["fit"].get(h), f"fit.{h}")
            ev = _object(sections["eval"].get(h), f"eval.{h}")
            results[h] = HeadResult(
                calibrator=calibrators.get(h),
                fit=None if fit is None else FitResult(**_leaf_fields(FitResult, fit, f"fit.{h}")),
                eval=None if ev is None else EvalResult.from_dict(ev, f"eval.{h}"),
                threshold_shift=_shifts(sections["threshold_shift"].get(h), f"threshold_shift.{h}"),
                per_class=[ClassResult.from_dict(c, f"per_class.{h}[{i}]")
                           for i, c in enumerate(_items(sections["per_class"].get(h), f"per_class.{h}"))],
                ultralytics_val=ValCheck.from_dict(sections["ultralytics_val"].get(h), f"ultralytics_val.{h}"),
                candidates=[Candidate.from_dict(c, f"calibration_candidates.{h}[{i}]")
                            for i, c in enumerate(_items(cands.get(h), f"calibration_candidates.{h}"))] or None,
                detection_change=None if changes.get(h) is None else DetectionChange(
                    **_leaf_fields(DetectionChange, _object(changes[h], f"detection_change.{h}", optional=False),
                                   f"detection_change.{h}")),
                temperature_fit=TemperatureFit.from_dict(tfits.get(h), f"temperature_fit.{h}"),
            )
        names = [_text(n, f"class_names[{i}]") for i, n in enumerate(_items(d.get("class_names"), "class_names"))]
        return cls(
            model=_text(d.get("model"), "model") or "",
            data=_text(d.get("data"), "data") or "",
            class_names=[n or str(i) for i, n in enumerate(names)],
            heads=list(heads),
            settings=RecordedSettings.from_dict(d, ""),
            results=results,
            corrupt_images=[str(x) for x in _items(d.get("corrupt_images"), "corrupt_images")],
            det_calib_version=_text(d.get("det_calib_version"), "det_calib_version") or "",
            created=_text(d.get("created"), "created"),
            seconds=_number(d.get("seconds"), "seconds"),
            gt_counts=gt_counts_from_dict(d),
            ensemble=_ensemble_from_dict(d.get("ensemble")),
            bad_labels=[str(x) for x in _items(d.get("bad_labels"), "bad_labels")],
            timings=Timings.from_dict(d.get("timings")),
        )

    def write(self, path: str | Path) -> Path:
        """Write ``calibration.json`` atomically (NaN as null)."""
        from det_calib.io import write_json

        return write_json(path, self.to_dict())

    @classmethod
    def read(cls, path: str | Path) -> RunResult:
        """Read and check a ``calibration.json``.

        Raises:
            InputError: Missing, not JSON, another schema version or a bad field; the message is
                one line that names the file.
        """
        return _read_json(path, cls.from_dict)


def _ensemble_from_dict(d: Any) -> Any:
    if d is None:
        return None
    # through the package's lazy exports: ensemble_record builds on this module's records
    from det_calib import record

    return record.EnsembleRecord.from_dict(d)


def _check_version(d: Any) -> None:
    if not isinstance(d, dict):
        raise InputError(f"expected a JSON object, got {type(d).__name__}")
    version = d.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise InputError(f"schema_version {version!r} is not supported (this det_calib reads {SCHEMA_VERSION}); "
                         "rerun `det-calib calibrate` with this version")


def gt_counts_from_dict(d: dict[str, Any]) -> dict[str, list[int]] | None:
    """``gt_counts`` of a ``calibration.json`` object: split -> ground-truth boxes per class id.

    None when the key is absent (runs written before it existed: count from the dataset).

    Raises:
        InputError: The key is not an object of lists of non-negative integers.
    """
    v = _object(d.get("gt_counts"), "gt_counts")
    if v is None:
        return None
    out = {}
    for sp, counts in v.items():
        where = f"gt_counts.{sp}"
        if not isinstance(counts, list):
            raise InputError(f"`{where}` must be a list of counts per class id, got {type(counts).__name__}")
        out[sp] = [_integer(n, f"{where}[{i}]") for i, n in enumerate(counts)]
        if any(n is None or n < 0 for n in out[sp]):
            raise InputError(f"`{where}` must hold integers >= 0, got {counts!r}")
    return out


def calibrators_from_dict(d: dict[str, Any], heads: list[str] | None = None) -> dict[str, Calibrator]:
    """Head -> calibrator of a ``calibration.json`` object (``temperature``, then ``calibrators``).

    Args:
        d: The object.
        heads: Heads to read; default every head named in ``temperature`` and ``calibrators``.
    """
    temps = d.get("temperature")
    if not isinstance(temps, dict):
        raise InputError(f"`temperature` must be an object mapping head to T, got {temps!r}")
    others = _object(d.get("calibrators"), "calibrators") or {}
    out: dict[str, Calibrator] = {}
    for h in heads if heads is not None else list(dict.fromkeys([*temps, *others])):
        t = temps.get(h)
        if t is not None and not (isinstance(t, (int, float)) and not isinstance(t, bool) and _temperature_ok(t)):
            raise InputError(f"temperature of head {h} must be a number > 0, got {t!r}")
        if t is not None:
            out[h] = Calibrator.temperature_scaling(t)
        elif h in others:
            out[h] = Calibrator.from_dict(others[h], f"calibrators.{h}")
    return out


def read_calibrators(path: str | Path) -> dict[str, Calibrator]:
    """Head -> calibrator of a ``calibration.json`` (only the calibrators are read and checked,
    so a file holding just ``{"temperature": {...}}`` is enough).

    Raises:
        InputError: Missing, not JSON, another schema version or a bad calibrator (one line).
    """

    def parse(d: Any) -> dict[str, Calibrator]:
        _check_version(d)
        return calibrators_from_dict(d)

    return _read_json(path, parse)


def _read_json(path: str | Path, parse: Any) -> Any:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"calibration file not found: {path}")
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"cannot read {path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {path}: {type(e).__name__}") from None
    try:
        return parse(d)
    except InputError as e:
        raise InputError(f"{path}: {e}") from None
