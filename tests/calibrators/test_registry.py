"""The calibrator contract and its registry: the package's methods in their simplicity order, and a
calibrator defined in this file, registered here and nowhere else, run through the fit, ``auto``'s
cross-validation, a calibration run with its report, and the fold into a checkpoint."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch

from det_calib.calibrators import registry
from det_calib.calibrators.base import LogitCalibrator
from det_calib.errors import InputError


class ShiftCalibrator(LogitCalibrator):
    """``z + b``: one offset in logit, fitted by Newton's method on the weighted NLL."""

    format = "tests.ShiftCalibrator"
    _fitted_attr = "b_"

    def fit(
        self,
        logits: Any,
        labels: Any,
        *,
        classes: Any = None,
        weights: Any = None,
        groups: Any = None,
    ) -> ShiftCalibrator:
        z, y = np.asarray(logits, dtype=np.float64), np.asarray(labels, dtype=np.float64)
        w = np.ones_like(z) if weights is None else np.asarray(weights, dtype=np.float64)
        b = 0.0
        for _ in range(50):
            p = 1.0 / (1.0 + np.exp(-(z + b)))
            step = np.sum(w * (p - y)) / max(np.sum(w * p * (1 - p)), 1e-12)
            b -= step
            if abs(step) < 1e-12:
                break
        self.b_ = float(b)
        return self

    def transform_logits(self, logits: Any, *, classes: Any = None) -> np.ndarray:
        self._check_fitted()
        return np.asarray(logits, dtype=np.float64) + self.b_

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "version": 1, "b": self.b_}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShiftCalibrator:
        obj = cls()
        obj.b_ = float(d["b"])
        return obj

    @classmethod
    def words(cls, d: dict[str, Any], method: str) -> str:
        return f"shift b = {d['b']:.3f}"

    def affine_params(self, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
        return np.ones(n_classes), np.full(n_classes, self.b_)


@pytest.fixture
def shift():
    """``shift`` registered between temperature and platt, for one test only."""
    registry.register("shift", order=15)(ShiftCalibrator)
    yield "shift"
    registry._unregister("shift")


def _shifted(n=20_000, b=0.8, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.normal(-1.0, 2.5, n)
    y = rng.random(n) < 1.0 / (1.0 + np.exp(-(z + b)))
    return z, y, np.arange(n) // 10


@pytest.mark.fast
def test_the_package_registers_its_methods_simplest_first():
    assert registry.methods() == (
        "none",
        "temperature",
        "platt",
        "spline",
        "class-temperature",
        "class-platt",
        "size-platt",
        "isotonic",
        "class-isotonic",
    )
    assert registry.global_methods() == ("none", "temperature", "platt", "spline", "isotonic")
    assert [m for m in registry.methods() if registry.method_spec(m).per_class] == [
        "class-temperature",
        "class-platt",
        "class-isotonic",
    ]
    assert registry._formats() == tuple(
        sorted(
            f"det_calib.{c}"
            for c in (
                "Identity",
                "TemperatureScaler",
                "PlattScaler",
                "SplineCalibrator",
                "ClassAffineScaler",
                "IsotonicCalibrator",
                "ClassIsotonicCalibrator",
                "SizePlattScaler",
            )
        )
    )
    assert [m for m in registry.methods() if registry.method_spec(m).uses_size] == ["size-platt"]
    assert [m for m in registry.methods() if registry.method_spec(m).reranks] == [
        "class-temperature",
        "class-platt",
        "size-platt",
        "class-isotonic",
    ]
    for m in registry.methods():  # every method builds an instance of the contract
        assert isinstance(registry.make_calibrator(m), LogitCalibrator)
        assert registry.make_calibrator(m).deploy_form in ("affine", "hinges")
    with pytest.raises(InputError, match="one of"):
        registry.make_calibrator("beta")
    with pytest.raises(InputError, match="already registered"):
        registry.register("platt", order=1)(ShiftCalibrator)
    with pytest.raises(InputError, match="calibrator dict"):
        registry.calibrator_from_dict({"format": "tests.Nothing"})


@pytest.mark.fast
def test_a_registered_calibrator_is_listed_and_then_removed(shift):
    assert registry.methods()[:4] == ("none", "temperature", "shift", "platt")
    assert "shift" in registry.global_methods()
    from det_calib.job.settings import _calibration_methods as calibration_methods
    from det_calib.job.settings import _method_help as method_help

    assert "shift" in calibration_methods() and "temperature, shift, platt" in method_help()
    registry._unregister("shift")
    assert "shift" not in registry.methods() and "tests.ShiftCalibrator" not in registry._formats()
    registry.register("shift", order=15)(ShiftCalibrator)  # the fixture removes it again


@pytest.mark.fast
def test_a_calibrator_defined_here_fits_and_wins_auto_cv(shift):
    from det_calib.calibrators.base import equivalent_conf
    from det_calib.selection.cross_validation import fit_calibrator, select_calibrator

    z, y, g = _shifted()
    cal = fit_calibrator("shift", z, y, groups=g)
    assert cal.b_ == pytest.approx(0.8, abs=0.05)  # the offset the labels were drawn with
    back = registry.calibrator_from_dict(json.loads(json.dumps(cal.to_dict())))
    np.testing.assert_array_equal(back.transform_logits(z[:5]), z[:5] + cal.b_)
    # the contract's default equivalent threshold: sigmoid(logit(conf) + b)
    assert equivalent_conf(cal, 0.25) == pytest.approx(
        1 / (1 + np.exp(-(np.log(1 / 3) + cal.b_))), abs=1e-6
    )
    # auto's CV: every registered method is a candidate; the offset is the true map and simpler than Platt
    sel = select_calibrator(
        z, y, groups=g, methods=("temperature", "shift", "platt"), fit_min_confs=(0.0,), n_repeats=2
    )
    assert {c.method for c in sel.candidates} == {"none", "temperature", "shift", "platt"}
    assert sel.chosen.method == "shift", sel.reason
    assert isinstance(sel.calibrator, ShiftCalibrator)


def test_a_calibrator_defined_here_folds_into_the_checkpoint(shift, tmp_path, demo_model_path):
    from det_calib.capture.predictor import load_detector
    from det_calib.deploy.fold import _cls_convs, read_calibration_metadata
    from det_calib.deploy.fold import _write_folded_checkpoint as write_folded_checkpoint

    z, y, _ = _shifted()
    cal = registry.make_calibrator("shift").fit(z, y)
    out = write_folded_checkpoint(demo_model_path, tmp_path / "shift.pt", {"nms": cal})
    meta = read_calibration_metadata(out)
    assert meta["calibrators"]["nms"] == cal.to_dict()
    before = [
        c.bias.detach().double() for c in _cls_convs(load_detector(demo_model_path).model, "nms")
    ]
    after = [c.bias.detach().double() for c in _cls_convs(load_detector(out).model, "nms")]
    for b0, b1 in zip(
        before, after, strict=True
    ):  # a = 1: the offset is added to every class channel's bias
        torch.testing.assert_close(b1, b0 + cal.b_, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_a_calibrator_defined_here_runs_through_a_calibration_run_and_its_report(
    shift, tmp_path, demo_model_path, fixture_yaml
):
    from det_calib.pipeline.calibrate_job import calibrate
    from det_calib.record.run_result import RunResult
    from det_calib.report import write_report

    run = calibrate(
        demo_model_path,
        fixture_yaml,
        out=tmp_path / "run",
        method="auto",
        n_boot=20,
        run_val=False,
        progress=False,
        head="nms",
    )
    result = RunResult.read(run.out_dir / "calibration.json")
    tried = {c.calibrator.method for c in result.head("nms").candidates}
    assert "shift" in tried, tried  # auto's candidates are the registry's global methods
    html = write_report(run.out_dir)["html"].read_text()
    assert "shift" in html
    shifted = calibrate(
        demo_model_path,
        fixture_yaml,
        out=tmp_path / "shift",
        method="shift",
        n_boot=20,
        run_val=False,
        progress=False,
        head="nms",
        boxes=str(run.out_dir),
    )
    rec = RunResult.read(shifted.out_dir / "calibration.json").head("nms").calibrator
    assert rec.method == "shift" and rec.params["map"]["format"] == "tests.ShiftCalibrator"
    assert (
        f"shift b = {rec.params['map']['b']:.3f}" in (shifted.out_dir / "report.html").read_text()
    )
    from det_calib.deploy.fold import read_calibration_metadata

    assert (
        read_calibration_metadata(shifted.out_dir / "calibrated.pt")["calibrators"]["nms"]
        == rec.params["map"]
    )
