"""det_calib.attach / detach on real Ultralytics predict: the temperature's scores equal
calibrated.pt's, the size-conditioned map's scores (and every class's probability) equal the map
applied to the captured logits and the run's own ``calibrated`` column, and detach gives the raw
output back bit for bit; both heads."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch

import det_calib
from det_calib.calibrators.base import calibrated_logits, log_area
from det_calib.capture.predictor import capture
from det_calib.deploy.hook import _hook_of
from det_calib.deploy.posthoc import load_calibrators
from det_calib.errors import InputError
from det_calib.numeric import sigmoid
from det_calib.pipeline.calibrate_job import calibrate

HEADS = (("nms", None), ("e2e", False))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, demo_model_path, fixture_yaml):
    root = tmp_path_factory.mktemp("hook")
    kw = dict(n_boot=10, run_val=False, report=False, progress=False, imgsz=320)
    return {
        m: calibrate(demo_model_path, fixture_yaml, out=root / m, method=m, **kw).out_dir
        for m in ("temperature", "size-platt")
    }


def _yolo(path):
    from ultralytics import YOLO

    return YOLO(str(path))


def _match(rows: np.ndarray, xy: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """Index in (``xy``, ``cls``) of each predicted row (same class, corners within 1e-3), -1 when none."""
    out = []
    for r in rows:
        d = np.abs(xy - r[:4]).max(axis=1) + 1e9 * (cls != int(r[5]))
        j = int(np.argmin(d)) if len(d) else -1
        out.append(j if j >= 0 and d[j] <= 1e-3 else -1)
    return np.array(out, dtype=np.int64)


def test_with_a_temperature_attach_scores_as_the_calibrated_checkpoint(
    runs, demo_model_path, fixture_images
):
    folded = _yolo(runs["temperature"] / "calibrated.pt")
    model = det_calib.attach(_yolo(demo_model_path), runs["temperature"])
    compared = 0
    for img in fixture_images[:6]:
        for _, nms in HEADS:
            want = (
                folded.predict(img, conf=0.25, nms=nms, imgsz=320, verbose=False)[0]
                .boxes.data.double()
                .numpy()
            )
            got = (
                model.predict(img, conf=0.25, nms=nms, imgsz=320, verbose=False)[0]
                .boxes.data.double()
                .numpy()
            )
            j = _match(got, want[:, :4], want[:, 5].astype(int))
            clear = (
                got[:, 4] > 0.25 + 1e-5
            )  # a box at the threshold itself may fall either side of it
            assert (j[clear] >= 0).all()
            assert np.abs(got[j >= 0, 4] - want[j[j >= 0], 4]).max(initial=0) <= 1e-6
            assert len(want) - len(got) in (-1, 0, 1)
            compared += int((j >= 0).sum())
    assert compared > 20


def test_with_the_size_map_attach_scores_as_the_run_and_the_captured_logits(
    runs, demo_model_path, fixture_images
):
    run = runs["size-platt"]
    assert not (run / "calibrated.pt").exists()
    boxes = pl.read_parquet(run / "boxes.parquet")
    cals = load_calibrators(run / "calibration.json")
    assert all(c.uses_size for c in cals.values())
    model = det_calib.attach(_yolo(demo_model_path), run)
    for head, nms in HEADS:
        compared = 0
        for img in fixture_images:
            r = model.predict(img, conf=0.001, nms=nms, imgsz=320, verbose=False)[0]
            got = r.boxes.data.double().numpy()
            mine = boxes.filter(
                (pl.col("head") == head) & (pl.col("image") == img.name)
            )  # in one split
            j = _match(got, mine.select("x1", "y1", "x2", "y2").to_numpy(), mine["cls"].to_numpy())
            assert (j >= 0).all(), (head, img.name)
            np.testing.assert_allclose(got[:, 4], mine["calibrated"].to_numpy()[j], atol=1e-6)
            np.testing.assert_allclose(
                r.calibrated_probs[np.arange(len(got)), got[:, 5].astype(int)], got[:, 4], atol=1e-6
            )
            assert np.all(np.diff(got[:, 4]) <= 0)  # ordered by the calibrated conf
            compared += len(got)
        assert compared > 30, head
    # every class's probability: the map applied to the captured logit of that class
    img = fixture_images[0]
    for head, nms in HEADS:
        cap = capture(
            str(demo_model_path),
            [img],
            head=head,
            imgsz=320,
            conf=0.001,
            all_logits=True,
            progress=False,
        )
        r = model.predict(img, conf=0.001, nms=nms, imgsz=320, verbose=False)[0]
        got = r.boxes.data.double().numpy()
        xy = cap.select("x1", "y1", "x2", "y2").to_numpy()
        j = _match(got, xy, cap["cls"].to_numpy())
        lg = np.stack(cap["logits"].to_numpy()).astype(np.float64)[j]
        n, nc = lg.shape
        la = log_area(xy[j], cap["img_w"].to_numpy()[j], cap["img_h"].to_numpy()[j])
        want = sigmoid(
            calibrated_logits(cals[head], lg.ravel(), np.tile(np.arange(nc), n), np.repeat(la, nc))
        )
        np.testing.assert_allclose(r.calibrated_probs, want.reshape(n, nc), atol=1e-9)


def test_detach_gives_the_raw_output_back_bit_for_bit(runs, demo_model_path, fixture_images):
    model = _yolo(demo_model_path)
    cls, img = type(model), fixture_images[1]
    before = {
        h: model.predict(img, nms=nms, imgsz=320, verbose=False)[0].boxes.data.clone()
        for h, nms in HEADS
    }
    predictor = model.predictor
    det_calib.attach(model, runs["size-platt"])
    assert _hook_of(model) is not None and type(model) is not cls
    during = {
        h: model.predict(img, nms=nms, imgsz=320, verbose=False)[0].boxes.data.clone()
        for h, nms in HEADS
    }
    assert any(not torch.equal(before[h], during[h]) for h, _ in HEADS)
    det_calib.attach(model, runs["temperature"])  # attaching again replaces the hook
    det_calib.detach(model)
    assert type(model) is cls and model.predictor is predictor and _hook_of(model) is None
    for h, nms in HEADS:
        after = model.predict(img, nms=nms, imgsz=320, verbose=False)[0].boxes.data
        assert torch.equal(before[h], after), h
    assert det_calib.detach(model) is model  # not attached: nothing to do


def test_attach_refuses_what_it_cannot_serve(runs, demo_model_path, tmp_path):
    with pytest.raises(InputError, match="no calibration.json"):
        det_calib.attach(_yolo(demo_model_path), tmp_path)
    with pytest.raises(InputError, match="Expected argument `run`"):
        det_calib.attach(_yolo(demo_model_path), 3)
    other = _yolo(demo_model_path)
    other.model.names = {0: "a", 1: "b"}
    with pytest.raises(InputError, match="classes differ"):
        det_calib.attach(other, runs["temperature"])


def test_apply_calibrator_rescores_with_the_size_map_as_attach(
    runs, demo_model_path, fixture_images
):
    img = fixture_images[2]
    model = _yolo(demo_model_path)
    raw = model.predict(img, conf=0.25, imgsz=320, verbose=False)[0]
    posthoc = det_calib.apply_calibrator(
        raw, runs["size-platt"] / "calibration.json", head="nms"
    ).boxes.data
    hooked = (
        det_calib.attach(_yolo(demo_model_path), runs["size-platt"])
        .predict(img, conf=0.001, imgsz=320, verbose=False)[0]
        .boxes.data
    )
    got, want = posthoc.double().numpy(), hooked.double().numpy()
    j = _match(got, want[:, :4], want[:, 5].astype(int))
    assert (j >= 0).all() and len(got) > 0
    np.testing.assert_allclose(
        got[:, 4], want[j, 4], atol=1e-5
    )  # conf -> logit -> map: float32 rounding
