"""A head's calibrator as its run records it: :class:`Calibrator` (method and parameters), the
record of a fitted calibrator and back (:meth:`Calibrator.of_fitted`, :func:`calibrator_of`), and
the candidates ``auto`` compared (:class:`CandidateRecord`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from det_calib.calibrators.base import LogitCalibrator
from det_calib.calibrators.registry import calibrator_from_dict, make_calibrator
from det_calib.calibrators.temperature import TemperatureScaler
from det_calib.codec import Record, decode, spec
from det_calib.errors import InputError
from det_calib.record.eval_record import OperatingFigures

__all__ = [
    "CVScores",
    "Calibrator",
    "CandidateEval",
    "CandidateRecord",
    "calibrator_of",
]


@dataclass(frozen=True)
class Calibrator(Record):
    """A fitted calibration map of one head: a method name and its parameters.

    ``temperature`` (``params = {"temperature": T}``, ``conf = sigmoid(logit / T)``) is what
    :func:`det_calib.pipeline.calibrate_job.calibrate` fits; other methods carry their own parameters.
    """

    WHERE = "calibrator"

    method: str = spec(check=(bool, "the name of a calibration method"))
    params: dict[str, Any] = spec(required=True)

    @classmethod
    def temperature_scaling(cls, t: float) -> Calibrator:
        return cls("temperature", {"temperature": float(t)})

    @property
    def temperature(self) -> float | None:
        """T of a temperature calibrator, else None."""
        return float(self.params["temperature"]) if self.method == "temperature" else None

    @classmethod
    def of_fitted(cls, cal: LogitCalibrator, method: str, floor: float) -> Calibrator:
        """The record of a fitted calibrator (back: :func:`calibrator_of`): the temperature method is
        ``Calibrator("temperature", {"temperature": T})`` (written as ``temperature: {head: T}``, as
        always); any other method is ``Calibrator(method, {"fit_min_conf": floor, "map":
        cal.to_dict()})``."""
        if method == "temperature":
            return cls.temperature_scaling(float(cal.temperature_))
        return cls(method, {"fit_min_conf": float(floor), "map": cal.to_dict()})


def calibrator_of(rec: Calibrator) -> LogitCalibrator:
    """The fitted calibrator of a record (a :class:`~det_calib.calibrators.base.LogitCalibrator`)."""

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

    se: float | None = spec(None, key="cv_se")
    diff: float | None = spec(None, key="cv_diff")
    diff_se: float | None = spec(None, key="cv_diff_se")
    diff_none: float | None = spec(None, key="cv_diff_none")
    diff_none_se: float | None = spec(None, key="cv_diff_none_se")
    shrinkage: float | None = None
    error: str | None = None
    verdict: str | None = None


@dataclass(frozen=True)
class CandidateEval:
    """A candidate's all-box figures on the eval split (missing ones None)."""

    ece_all: float | None = None
    ece_all_ci: Any = None
    nll: float | None = None
    brier: float | None = None
    class_kept_ece: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class CandidateRecord(Record):
    """A calibrator considered for a head, with its cross-validated score (lower is better)."""

    calibrator: Calibrator = spec(flat=str)
    cv_score: float | None = None
    selected: bool = False
    eval: dict[str, Any] | None = spec(None, omit="none")
    """Figures of the candidate refitted on the whole fit split, on the eval split (``operating``:
    a list of :class:`OperatingFigures` dicts; ``ece_all``, ``ece_all_ci``, ``nll``, ``brier``;
    ``class_kept_ece``: class id -> kept-set ECE at the lowest threshold). Only the best fit range
    of each method is evaluated."""

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
        return decode(
            list[OperatingFigures], (self.eval or {}).get("operating", []), "eval.operating"
        )

    @property
    def cv(self) -> CVScores:
        """Its cross-validation figures, typed."""
        return decode(CVScores, self.calibrator.params, "params")

    @property
    def eval_figures(self) -> CandidateEval:
        """Its all-box figures on the eval split, typed (all None when it was not scored there)."""
        return decode(CandidateEval, self.eval or {}, "eval")
