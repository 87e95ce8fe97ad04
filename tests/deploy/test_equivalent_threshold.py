"""The raw threshold equivalent to a calibrated one (det_calib/deploy/calibrated_export.py,
``equivalent_raw_threshold``) at its float32 boundary.

Ultralytics keeps a box when its float32 score is strictly above the threshold (``conf >
conf_thres`` in its NMS, and in the one-to-one head's filter). The returned ``t`` must keep exactly
the boxes whose calibrated score is above ``conf``: a score of exactly ``t`` is dropped and
calibrates to at most ``conf``, the float32 one step above ``t`` is kept and calibrates above
``conf`` (``t`` is the last float32 that calibrates to ``conf`` or below). Checked for every global
method and per class for a per-class map, by the definition and through Ultralytics' own filters.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from det_calib.calibrators.registry import make_calibrator
from det_calib.capture.exported import P_CEILING
from det_calib.deploy.calibrated_export import (
    _deployed_map,
    _equivalent_raw_threshold,
    calibrated_probs,
)

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)

NC = 3
CONFS = (0.05, 0.1, 0.25, 0.5, 0.9)
F32 = np.float32


def fitted(method: str):
    """A calibrator fitted on 4,000 planted boxes whose true slope and offset differ by class."""
    rng = np.random.default_rng(0)
    k = rng.integers(0, NC, 4000)
    z = rng.normal(-1.0, 2.5, k.size)
    slope, offset = np.array([0.5, 0.8, 1.3])[k], np.array([0.4, -0.3, 0.0])[k]
    y = (rng.uniform(size=k.size) < 1.0 / (1.0 + np.exp(-(slope * z + offset)))).astype(float)
    cal = make_calibrator(method)
    return cal.fit(z, y, classes=k) if cal.per_class else cal.fit(z, y)


def steps(t: float, n: int = 2) -> np.ndarray:
    """The float32 scores from ``n`` steps below ``t`` to ``n`` steps above it."""
    out = [F32(t)]
    for _ in range(n):
        out = [np.nextafter(out[0], F32(0.0)), *out, np.nextafter(out[-1], F32(1.0))]
    return np.array(out, dtype=F32)


def cases():
    for method in ("temperature", "platt", "spline", "isotonic", "class-platt"):
        cal = fitted(method)
        for cls in range(NC) if cal.per_class else (0,):
            for conf in CONFS:
                yield method, cal, cls, conf


CASES = list(cases())


@pytest.mark.parametrize("case", CASES, ids=[f"{m}-cls{k}-{c}" for m, _, k, c in CASES])
def test_score_at_threshold_dropped_one_step_above_kept(case):
    """At ``t`` (and below) the calibrated score is at most ``conf`` and ``t`` does not keep the
    box; one float32 step above ``t`` (and beyond) it is above ``conf`` and the box is kept."""
    _, cal, cls, conf = case
    t = _equivalent_raw_threshold(cal, conf, cls=cls, nc=NC)
    assert F32(t) == t and 0.0 < t < P_CEILING  # a float32 value, strictly inside (0, 1)
    p = steps(t)
    calibrated = calibrated_probs(cal, p, np.full(p.size, cls), NC)
    assert (calibrated > conf).tolist() == [False, False, False, True, True], (t, calibrated)
    assert (p > F32(t)).tolist() == [False, False, False, True, True]
    # the same boundary in logit space, the form the export's graph computes in
    z_map = _deployed_map(cal, NC)(
        np.log(p.astype(np.float64)) - np.log1p(-p.astype(np.float64)), np.full(p.size, cls)
    )
    assert (z_map > np.log(conf) - np.log1p(-conf)).tolist() == [False, False, False, True, True]


def test_known_answer_temperature():
    """T = 2: calibrated(p) = sigmoid(logit(p) / 2) > 0.25 exactly when p > sigmoid(2 logit(0.25)) =
    0.1, to the float32 step."""
    cal = make_calibrator("temperature")
    cal.temperature_ = 2.0
    t = _equivalent_raw_threshold(cal, 0.25)
    assert abs(t - 0.1) < 1e-7
    assert sigmoid_t(F32(t)) <= 0.25 < sigmoid_t(np.nextafter(F32(t), F32(1.0)))


def sigmoid_t(p) -> float:
    z = np.log(np.float64(p)) - np.log1p(-np.float64(p))
    return float(1.0 / (1.0 + np.exp(-z / 2.0)))


@pytest.mark.parametrize("method", ["spline", "class-platt"])
def test_ultralytics_filters_keep_exactly_the_calibrated_set(method):
    """Boxes scored on the float32 steps around each class's threshold, through Ultralytics' NMS
    (per-anchor output) and its one-to-one filter (top-k rows) at ``conf_thres = t``: the kept
    boxes are exactly those whose calibrated score is above ``conf``."""
    from ultralytics.utils.nms import non_max_suppression

    cal = fitted(method)
    for conf in CONFS:
        for cls in range(NC):
            t = _equivalent_raw_threshold(cal, conf, cls=cls, nc=NC)
            p = steps(t, n=3)
            n = p.size
            want = calibrated_probs(cal, p, np.full(n, cls), NC) > conf
            assert 0 < want.sum() < n
            # disjoint boxes, one per score, so that NMS suppresses none
            x1 = np.arange(n, dtype=np.float32) * 50.0
            xywh = np.stack(
                [x1 + 10, np.full(n, 10, F32), np.full(n, 20, F32), np.full(n, 20, F32)]
            )
            scores = np.zeros((NC, n), dtype=F32)
            scores[cls] = p
            per_anchor = torch.from_numpy(np.concatenate([xywh, scores])[None])
            kept = non_max_suppression(per_anchor, conf_thres=t, iou_thres=0.7, nc=NC, max_det=300)[
                0
            ]
            assert sorted(kept[:, 4].numpy().tolist()) == sorted(p[want].tolist())
            assert (kept[:, 5].numpy() == cls).all()
            xyxy = np.stack([x1, np.full(n, 0, F32), x1 + 20, np.full(n, 20, F32)], axis=1)
            rows = np.concatenate([xyxy, p[:, None], np.full((n, 1), cls, F32)], axis=1)
            kept = non_max_suppression(
                torch.from_numpy(rows[None]), conf_thres=t, nc=NC, end2end=True
            )[0]
            assert sorted(kept[:, 4].numpy().tolist()) == sorted(p[want].tolist())


def test_thresholds_of_a_run_and_its_engine_record(tmp_path):
    """One raw conf per calibrated conf for a global map, one per class for a per-class map; the
    engine record round-trips through engine.json and says both in its summary lines."""
    from det_calib.deploy.calibrated_export import (
        EngineRecord,
        deployed_file,
        run_equivalent_thresholds,
    )
    from det_calib.deploy.calibrated_export import (
        _calibrated_export_name as calibrated_export_name,
    )
    from det_calib.deploy.calibrated_export import (
        _equivalent_raw_thresholds as equivalent_raw_thresholds,
    )
    from det_calib.errors import InputError

    glob, per = fitted("spline"), fitted("class-platt")
    eq = run_equivalent_thresholds(
        {"nms": glob, "e2e": per}, {"nms": "spline", "e2e": "class-platt"}, [0.25, 0.5], NC
    )
    assert [e["conf"] for e in eq["nms"]] == [0.25, 0.5] and all(
        e["raw_conf_per_class"] is None for e in eq["nms"]
    )
    assert [e["raw_conf"] for e in eq["nms"]] == [
        _equivalent_raw_threshold(glob, c, nc=NC) for c in (0.25, 0.5)
    ]
    assert all(e["raw_conf"] is None for e in eq["e2e"])
    assert [e["raw_conf_per_class"] for e in eq["e2e"]] == [
        [_equivalent_raw_threshold(per, c, cls=k, nc=NC) for k in range(NC)] for c in (0.25, 0.5)
    ]
    assert equivalent_raw_thresholds(glob, [0.25], NC, per_class=False) == eq["nms"][:1]
    rec = EngineRecord(
        engine="onnx fp32",
        format="onnx",
        precision="fp32",
        head="nms",
        imgsz=[320, 320],
        source=str(tmp_path / "best.onnx"),
        calibrated_export="calibrated.onnx",
        equivalent_thresholds=eq,
    )
    (tmp_path / "engine.json").write_text(json.dumps(rec.to_dict()))
    assert EngineRecord.read(tmp_path / "engine.json") == rec
    lines = rec.summary_lines()
    t = eq["nms"][0]["raw_conf"]
    assert (
        f"[nms]   or, with no code: raw conf > {t:.6g} on the raw engine keeps exactly the "
        "calibrated set "
        "at conf 0.25"
    ) in lines
    assert any(
        ln.startswith("[e2e]   a per-class map: raw conf per class at calibrated 0.25: ")
        for ln in lines
    )
    assert lines[0] == (
        "[nms] engine onnx fp32 (best.onnx): calibrated export calibrated.onnx (the calibration "
        "in its graph)"
    )
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(InputError, match="not a det_calib engine record"):
        EngineRecord.read(tmp_path / "bad.json")
    assert calibrated_export_name("m/best.ONNX") == "calibrated.onnx"
    assert calibrated_export_name("best_int8_openvino_model") == "calibrated_openvino_model"
    assert (
        deployed_file("best.pt") == "calibrated.pt"
        and deployed_file("best.onnx") == "calibrated.onnx"
    )
