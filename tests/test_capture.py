"""Capture: boxes and confs equal model.predict's, logits are the head's raw scores."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from det_calib.capture import available_heads, capture, load_detector
from det_calib.errors import InputError


def _predict_rows(yolo, images, *, head, imgsz, conf=0.001):
    kw = {"nms": False} if head == "e2e" else {}
    res = yolo.predict([str(p) for p in images], conf=conf, imgsz=imgsz, batch=4, verbose=False, **kw)
    return np.concatenate([r.boxes.data.cpu().numpy() for r in res]), [len(r.boxes) for r in res]


def _assert_exact(df, ref, counts):
    assert df.height == len(ref) == sum(counts)
    xyxy = df.select("x1", "y1", "x2", "y2").to_numpy().astype(np.float32)
    np.testing.assert_array_equal(xyxy, ref[:, :4])
    np.testing.assert_array_equal(df["conf"].to_numpy().astype(np.float32), ref[:, 4])
    np.testing.assert_array_equal(df["cls"].to_numpy(), ref[:, 5].astype(int))
    np.testing.assert_array_equal(np.bincount(df["image_id"].to_numpy(), minlength=len(counts)), counts)
    z = df["logit"].to_numpy()
    # float32 sigmoid of the captured logit reproduces Ultralytics' conf
    sig32 = torch.sigmoid(torch.tensor(z, dtype=torch.float32)).numpy()
    assert np.abs(sig32 - df["conf"].to_numpy()).max() <= 1e-6
    assert np.abs(1 / (1 + np.exp(-z)) - df["conf"].to_numpy()).max() <= 1e-6


@pytest.mark.parametrize("head", ["nms", "e2e"])
def test_demo_capture_equals_predict(demo_model_path, fixture_images, head):
    from ultralytics import YOLO

    yolo = YOLO(str(demo_model_path))
    df = capture(yolo, fixture_images, head=head, imgsz=320, batch=4, progress=False)
    ref, counts = _predict_rows(YOLO(str(demo_model_path)), fixture_images, head=head, imgsz=320)
    _assert_exact(df, ref, counts)
    assert set(df["head"].unique()) == {head}
    # the demo detector is confident on some boxes and not on others
    assert df["conf"].max() > 0.5 and df["conf"].min() < 0.01


@pytest.mark.parametrize("cfg", ["yolov8n.yaml", "yolo11n.yaml", "yolo26n.yaml"])
def test_untrained_heads_capture_equals_predict(make_untrained, fixture_images, cfg):
    yolo = make_untrained(cfg)
    heads = available_heads(yolo)
    assert heads == (["nms", "e2e"] if cfg.startswith("yolo26") else ["nms"])
    for head in heads:
        df = capture(yolo, fixture_images[:4], head=head, imgsz=256, batch=2, progress=False)
        ref, counts = _predict_rows(yolo, fixture_images[:4], head=head, imgsz=256)
        assert df.height > 100
        _assert_exact(df, ref, counts)


def test_all_logits_column_holds_the_class_logit(make_untrained, fixture_images):
    yolo = make_untrained("yolo26n.yaml")
    df = capture(yolo, fixture_images[:2], head="nms", imgsz=256, all_logits=True, progress=False)
    lg = np.array(df["logits"].to_list())
    assert lg.shape == (df.height, 80)
    np.testing.assert_allclose(lg[np.arange(df.height), df["cls"].to_numpy()], df["logit"].to_numpy(), rtol=0, atol=0)
    # the predicted class is the arg-max logit (single-label NMS)
    np.testing.assert_array_equal(lg.argmax(1), df["cls"].to_numpy())


def test_saturated_scores_keep_their_logits(demo_model_path, fixture_images):
    """Above z ~ 16.6 float32 sigmoid is exactly 1.0; the captured logit must still be the raw one."""
    from ultralytics import YOLO

    yolo = YOLO(str(demo_model_path))
    with torch.no_grad():
        for level in yolo.model.model[-1].cv3:
            level[-1].bias += 25.0  # every logit shifted by +25: most scores saturate
    df = capture(yolo, fixture_images[:2], head="nms", imgsz=320, progress=False)
    conf, z = df["conf"].to_numpy(), df["logit"].to_numpy()
    sat = conf == 1.0
    assert sat.sum() > 10
    assert z[sat].min() >= 16.6 and np.unique(z[sat]).size > 10  # distinct logits, not a rebuilt constant
    # a rebuilt logit log(p / (1 - p)) would be infinite here
    assert np.isfinite(z).all()


def test_capture_rejects_missing_head_and_bad_models(tmp_path, make_untrained, fixture_images):
    with pytest.raises(InputError, match="no one-to-one"):
        capture(make_untrained("yolov8n.yaml"), fixture_images[:1], head="e2e", progress=False)
    with pytest.raises(InputError, match="model file not found"):
        load_detector(tmp_path / "nope.pt")
    bad = tmp_path / "corrupt.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="cannot load model"):
        load_detector(bad)
    with pytest.raises(InputError, match="not `detect`"):
        load_detector("yolo26n-cls.yaml")
    with pytest.raises(InputError, match="head"):
        capture(make_untrained("yolo26n.yaml"), fixture_images[:1], head="both", progress=False)


def test_progress_bar_shows_no_eta_until_the_speed_is_known(monkeypatch):
    """Model set-up and the first batch take long: the ETA waits for one more full batch and then
    reflects the steady speed (4 images per 2 s here), not the first result's 30 s."""
    from det_calib import capture as cap

    clock = iter([30.0, 30.1, 30.1, 30.1, 32.0])  # results arrive in batches of 4
    monkeypatch.setattr(cap.time, "monotonic", lambda: next(clock))  # the bar's speed clock
    bar = cap._progress(12, "capture", enabled=True, batch=4)
    for _ in range(4):
        bar.update(1)
    assert bar.total is None  # no total, so Ultralytics' bar shows no percentage and no ETA
    assert bar._format_rate(0.01) == ""  # and no speed
    bar.update(1)  # the first result of the second batch: 4 images in 2 s since the first result
    assert bar.total == 12 and bar.last_rate == pytest.approx(2.0)
    assert bar._format_rate(2.0) != ""
    monkeypatch.undo()
    bar.close()
    assert bar.total == 12
    assert isinstance(cap._progress(3, "x", enabled=False, batch=4), cap._NoBar)
