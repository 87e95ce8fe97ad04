"""Tests of det_calib.record.run_result: the typed result of a run and its calibration.json."""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from det_calib.errors import InputError
from det_calib.io import to_json
from det_calib.metrics import calibration as metrics
from det_calib.record.run_result import (
    _SCHEMA_VERSION,
    Calibrator,
    CandidateRecord,
    RunResult,
)
from det_calib.report.record_words import temperature_verdict

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "fixture_calibration.json"


@pytest.fixture(scope="module")
def ref() -> dict:
    return json.loads(REFERENCE.read_text())


def test_round_trip_is_exact(ref, tmp_path):
    """Reading calibration.json and writing it back gives the same object, key order included."""
    r = RunResult.from_dict(ref)
    back = r.to_dict()
    assert back.pop("schema_version") == _SCHEMA_VERSION
    assert back.pop("created") is None
    assert back == ref and list(back) == list(ref)
    r.seconds = 12.5
    path = r.write(tmp_path / "calibration.json")
    again = RunResult.read(path)
    assert again == r
    assert json.loads(path.read_text())["schema_version"] == _SCHEMA_VERSION


def test_typed_access(ref):
    r = RunResult.from_dict(ref)
    assert r.heads == ["nms", "e2e"] and r.class_names[3] == "rectangle"
    assert r.temperatures == ref["temperature"]
    h = r.head("nms")
    assert h.calibrator == Calibrator("temperature", {"temperature": ref["temperature"]["nms"]})
    assert h.eval.before.ece == ref["eval"]["nms"]["ece_before"]
    assert h.eval.after.laece_ci == tuple(ref["eval"]["nms"]["laece_after_ci"])
    assert h.eval.thresholded[0].boxes_after == ref["eval"]["nms"]["thresholded"][0]["boxes_after"]
    assert h.fit.iterations == ref["fit"]["nms"]["iterations"]
    assert h.threshold_shift[0].kept_after == ref["threshold_shift"]["nms"][0]["kept_after"]
    assert [c.name for c in h.per_class] == [c["name"] for c in ref["per_class"]["nms"]]
    assert (
        h.ultralytics_val.original.map50_95 == ref["ultralytics_val"]["nms"]["original"]["map50_95"]
    )
    assert r.settings.bootstrap.n_boot == 50 and r.settings.eval_split == ref["splits"]["eval"]
    o = h.eval.operating_after[0]
    ro = ref["eval"]["nms"]["operating_after"][0]
    assert o.ece_floor == ro["ece_floor"] and o.ece_floor_range == tuple(ro["ece_floor_range"])
    # 32 kept boxes: a perfectly calibrated detector scores ECE ~0.2 on so few; the 0.159 measured is at that floor
    assert o.ece_floor_range[0] < o.ece_floor_range[1] and o.at_floor is True


def test_laece_floor_fields_round_trip_and_old_runs_read_without_them():
    from det_calib.record.eval_record import OperatingFigures

    o = OperatingFigures(
        conf=0.25,
        boxes=1065,
        ece=0.04,
        laece0=0.1356,
        laece_floor=0.0944,
        laece_floor_range=(0.0818, 0.1070),
    )
    assert o.laece_at_floor is False
    assert OperatingFigures(laece0=0.105, laece_floor_range=(0.0818, 0.1070)).laece_at_floor is True
    assert (
        OperatingFigures(laece0=0.08, laece_floor_range=(0.0818, 0.1070)).laece_at_floor is True
    )  # below it
    assert OperatingFigures(laece0=0.1).laece_at_floor is None
    d = json.loads(json.dumps(o.to_dict()))
    assert d["laece_floor"] == 0.0944 and d["laece_floor_range"] == [0.0818, 0.107]
    assert OperatingFigures.from_dict(d, "o") == o
    # a run written before the floor: the keys are absent, the figures read as unknown
    old = {k: v for k, v in d.items() if not k.startswith("laece_floor")}
    back = OperatingFigures.from_dict(old, "o")
    assert (
        back.laece_floor is None and back.laece_floor_range is None and back.laece_at_floor is None
    )
    assert back.laece0 == 0.1356 and back.ece == 0.04
    with pytest.raises(InputError, match="laece_floor_range"):
        OperatingFigures.from_dict({**d, "laece_floor_range": [0.1]}, "o")


def test_operating_floor_fields_and_the_worse_tolerance():
    from det_calib.record.eval_record import OperatingFigures
    from det_calib.record.run_result import EvalResult
    from det_calib.report.record_words import operating_point_worse

    o = OperatingFigures(
        conf=0.25, boxes=1000, ece=0.05, ece_floor=0.03, ece_floor_range=(0.02, 0.045)
    )
    assert (
        o.at_floor is False
        and OperatingFigures(ece=0.04, ece_floor_range=(0.02, 0.045)).at_floor is True
    )
    assert OperatingFigures(ece=0.04).at_floor is None
    back = OperatingFigures.from_dict(json.loads(json.dumps(o.to_dict())), "o")
    assert back == o
    with pytest.raises(InputError, match="ece_floor_range"):
        OperatingFigures.from_dict({**o.to_dict(), "ece_floor_range": [0.1]}, "o")
    # the raw scores come from float32 conf, `none` from float64 logits: 1e-11 apart is not "worse"
    same = EvalResult(
        operating_before=[o], operating_after=[OperatingFigures(conf=0.25, ece=0.05 + 1e-11)]
    )
    assert operating_point_worse(same) is None
    worse = EvalResult(
        operating_before=[o], operating_after=[OperatingFigures(conf=0.25, ece=0.051)]
    )
    assert "0.0500 raw, 0.0510 calibrated" in operating_point_worse(worse)


def test_scores_compute_matches_metrics():
    """The evaluator's scores_of gives the metrics of det_calib.metrics.calibration, NLL from the logits."""
    from det_calib.evaluation.figures import _scores_of as scores_of

    rng = np.random.default_rng(0)
    n = 400
    z = rng.normal(-1, 2, n)
    y = rng.uniform(size=n) < 1 / (1 + np.exp(-z / 1.5))
    p = 1 / (1 + np.exp(-z / 1.5))
    loc = np.where(y, rng.uniform(0.5, 1, n), 0.0)
    cls = rng.integers(0, 3, n)
    feats = rng.uniform(0, 1, (n, 4))
    img = rng.integers(0, 40, n)
    s = scores_of(
        p,
        y,
        logit=z,
        temperature=1.5,
        loc_iou=loc,
        cls_id=cls,
        features=feats,
        image_id=img,
        ece_bins=10,
        laece_bins=20,
        dece_bins=[4, 2, 2, 2, 2],
        n_boot=20,
        seed=3,
    )
    assert s.ece == metrics.ece(p, y, n_bins=10)
    assert s.nll == pytest.approx(metrics.nll_logits(z, y, temperature=1.5), rel=1e-12)
    assert s.nll != pytest.approx(metrics.nll_logits(z, y), rel=1e-3)  # the temperature is used
    assert s.laece == metrics.laece(p, loc, cls, n_bins=20)
    ece10 = functools.partial(metrics.ece, n_bins=10)
    assert s.ece_ci == tuple(metrics.bootstrap_ci(ece10, img, p, y, n_boot=20, seed=3))
    flat = s.to_flat("after")
    assert set(flat) == {
        "ece_after",
        "ece_after_ci",
        "ace_after",
        "mce_after",
        "nll_after",
        "brier_after",
        "dece_after",
        "laece_after",
        "laece_after_ci",
        "laace_after",
    }


def test_other_calibrators_and_candidates(ref):
    """A non-temperature calibrator and CV candidates round-trip; `temperature` keeps only T heads."""
    r = RunResult.from_dict(ref)
    platt = Calibrator("platt", {"a": 0.9, "b": -0.2})
    import dataclasses

    r.results["e2e"] = dataclasses.replace(
        r.results["e2e"],
        calibrator=platt,
        candidates=[
            CandidateRecord(Calibrator.temperature_scaling(0.94), 0.31),
            CandidateRecord(platt, 0.30, selected=True),
        ],
    )
    d = json.loads(to_json(r.to_dict()))
    assert d["temperature"] == {"nms": ref["temperature"]["nms"]}
    assert d["calibrators"] == {"e2e": {"method": "platt", "params": {"a": 0.9, "b": -0.2}}}
    back = RunResult.from_dict(d)
    assert back.head("e2e").calibrator == platt and back.head("e2e").temperature is None
    assert (
        back.head("e2e").candidates[1].selected and back.head("e2e").candidates[0].cv_score == 0.31
    )
    assert back.temperatures == {"nms": ref["temperature"]["nms"]}


def test_gt_counts_round_trip(ref):
    """`gt_counts` (added after the reference was written): absent in older files, None, not written;
    present, read back exactly and written after `corrupt_images`."""
    assert RunResult.from_dict(ref).gt_counts is None
    d = json.loads(json.dumps(ref))
    d["gt_counts"] = {
        ref["splits"]["fit"]: [1, 0, 2, 0, 0, 0, 0, 5],
        ref["splits"]["eval"]: [0] * 8,
    }
    r = RunResult.from_dict(d)
    assert r.gt_counts == d["gt_counts"]
    back = r.to_dict()
    assert back["gt_counts"] == d["gt_counts"]
    keys = list(back)
    assert keys.index("gt_counts") == keys.index("corrupt_images") + 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema_version=2), "schema_version 2 is not supported"),
        (lambda d: d.update(heads=["yolo"]), "`heads` must be"),
        (
            lambda d: d["temperature"].update(nms=-1.0),
            "temperature of head nms must be a number > 0",
        ),
        (
            lambda d: d["eval"]["nms"].update(ece_before="low"),
            "`eval.nms.ece_before` must be a number",
        ),
        (
            lambda d: d["per_class"]["e2e"][2].update(boxes=1.5),
            "`per_class.e2e[2].boxes` must be an integer",
        ),
        (lambda d: d.pop("iou_match"), "`iou_match` is missing"),
        (
            lambda d: d["threshold_shift"].update(nms={"conf": 0.25}),
            "`threshold_shift.nms` must be a list",
        ),
        (lambda d: d.update(gt_counts={"test": {"0": 3}}), "`gt_counts.test` must be a list"),
        (
            lambda d: d.update(gt_counts={"test": [3, -1]}),
            "`gt_counts.test` must hold integers >= 0",
        ),
        (
            lambda d: d.update(gt_counts={"test": [3, 1.5]}),
            "`gt_counts.test[1]` must be an integer",
        ),
    ],
)
def test_damaged_file_fails_with_one_line(ref, tmp_path, change, message):
    d = json.loads(json.dumps(ref))
    change(d)
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(d))
    with pytest.raises(InputError, match=re.escape(message)) as e:
        RunResult.read(path)
    assert str(e.value).startswith(str(path)) and "\n" not in str(e.value)


def test_unreadable_files(tmp_path):
    with pytest.raises(InputError, match="calibration file not found"):
        RunResult.read(tmp_path / "none.json")
    (tmp_path / "c.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="expected a JSON object, got list"):
        RunResult.read(tmp_path / "c.json")
    (tmp_path / "c.json").write_text("{oops")
    with pytest.raises(InputError, match="not valid JSON"):
        RunResult.read(tmp_path / "c.json")


def test_nulls_are_undefined_numbers(ref):
    """JSON null (an undefined number) reads as None; missing per-head sections read as empty."""
    d = json.loads(json.dumps(ref))
    d["eval"]["nms"] = dict.fromkeys(d["eval"]["nms"])
    d["fit"] = None
    d["threshold_shift"] = None
    r = RunResult.from_dict(d)
    assert r.head("nms").eval.before.ece is None and r.head("nms").eval.thresholded == []
    assert r.head("nms").fit is None and r.head("e2e").threshold_shift == []


def test_verdict_words():
    assert temperature_verdict(1.4) == "too extreme" and temperature_verdict(0.8) == "too timid"
    assert (
        temperature_verdict(1.01) == "close to calibrated"
        and temperature_verdict(None) == "not fitted"
    )
    assert temperature_verdict(1.4, long=True) == "too extreme: too close to 0 and 1"
    assert math.isclose(math.exp(0.0198), 1.02, rel_tol=1e-3)
