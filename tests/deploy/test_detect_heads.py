"""Every detect head Ultralytics ships (YOLOv5u, v8, v9, v10, 11, 12, 26), built from its yaml:
capture equals ``predict`` bit for bit on each head mode the model has, and a temperature and a
spline map folded into the checkpoint give, through plain Ultralytics ``YOLO(path)``, the
calibrated scores of the same boxes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from det_calib.calibrators.registry import make_calibrator
from det_calib.capture.predictor import available_heads, capture
from det_calib.deploy.fold import (
    _write_folded_checkpoint,
    read_calibration_metadata,
    write_calibrated_checkpoint,
)

IMGSZ = 160
MIN_BOXES = 100  # boxes each comparison must hold, per head (an untrained head scores every anchor)

#: yaml -> the head class and head modes of the model it builds (the smallest scale of each family)
HEADS = {
    "yolov5nu.yaml": ("Detect", ["nms"]),
    "yolov8n.yaml": ("Detect", ["nms"]),
    "yolov9t.yaml": ("Detect", ["nms"]),
    "yolov10n.yaml": ("v10Detect", ["nms", "e2e"]),
    "yolo11n.yaml": ("Detect", ["nms"]),
    "yolo12n.yaml": ("Detect", ["nms"]),
    "yolo26n.yaml": ("Detect", ["nms", "e2e"]),
}


def _predict(yolo, images, head: str, conf: float = 0.001) -> list[np.ndarray]:
    """Plain Ultralytics predict, one image at a time (as capture): each image's ``boxes.data``."""
    kw = {"nms": False} if head == "e2e" else {}
    return [
        yolo.predict(str(p), conf=conf, imgsz=IMGSZ, verbose=False, **kw)[0]
        .boxes.data.cpu()
        .numpy()
        for p in images
    ]


def _assert_capture_equals_predict(df, rows: list[np.ndarray]) -> None:
    ref = np.concatenate(rows)
    assert df.height == len(ref) >= MIN_BOXES
    np.testing.assert_array_equal(
        df.select("x1", "y1", "x2", "y2").to_numpy().astype(np.float32), ref[:, :4]
    )
    np.testing.assert_array_equal(df["conf"].to_numpy().astype(np.float32), ref[:, 4])
    np.testing.assert_array_equal(df["cls"].to_numpy(), ref[:, 5].astype(int))
    np.testing.assert_array_equal(
        np.bincount(df["image_id"].to_numpy(), minlength=len(rows)), [len(r) for r in rows]
    )
    # the float32 sigmoid of the captured logit is predict's conf, bit for bit
    sig = torch.sigmoid(torch.tensor(df["logit"].to_numpy(), dtype=torch.float32)).numpy()
    np.testing.assert_array_equal(sig, ref[:, 4])


def _assert_calibrated_scores(raw, rows: list[np.ndarray], calibrate) -> int:
    """Every box ``rows`` (plain predict of a folded checkpoint) is a raw box with conf
    ``calibrate(its class logit)``; returns how many were compared."""
    compared = 0
    for i, got in enumerate(rows):
        mine = raw.filter(raw["image_id"] == i)
        xy = mine.select("x1", "y1", "x2", "y2").to_numpy()
        logits = np.stack(mine["logits"].to_numpy()).astype(np.float64)
        for r in got.astype(np.float64):
            # the raw rows of this box: the fold leaves the boxes as they are. An untrained head gives
            # some anchors the same box (clipped at the image's edge): the score is one of theirs
            same = np.abs(xy - r[:4]).max(axis=1) <= 1e-3
            assert same.any(), (i, r)
            expected = calibrate(logits[same, int(r[5])])
            assert np.abs(r[4] - expected).min() <= 1e-5, (i, int(r[5]), r[4], expected)
            compared += 1
    return compared


def _spline(seed: int = 0):
    """A monotone spline fitted to boxes whose correctness bends away from the raw sigmoid."""
    rng = np.random.default_rng(seed)
    z = rng.normal(-3.0, 2.5, 20_000)
    y = rng.random(z.size) < 1 / (1 + np.exp(-(0.6 * z + 0.8 + 0.1 * z**2 * (z > -1))))
    return make_calibrator("spline").fit(z, y)


@pytest.mark.slow  # 30 to 45 s for the seven on a shared 2-core CPU
@pytest.mark.parametrize("cfg", list(HEADS))
def test_capture_and_fold_on_every_detect_head(tmp_path, make_untrained, fixture_images, cfg):
    from ultralytics import YOLO

    images = fixture_images[:3]
    cls_name, heads = HEADS[cfg]
    source = tmp_path / "raw.pt"
    make_untrained(cfg).save(
        str(source)
    )  # half precision, as Ultralytics saves: every run below reads it
    yolo = YOLO(str(source))
    assert type(yolo.model.model[-1]).__name__ == cls_name and available_heads(yolo) == heads

    # (a) capture equals predict, bit for bit, on every head mode of the model
    for head in heads:
        _assert_capture_equals_predict(
            capture(yolo, images, head=head, imgsz=IMGSZ, progress=False),
            _predict(yolo, images, head),
        )

    # (b) folded calibrators: plain Ultralytics gives the calibrated scores of the raw boxes. The raw
    # capture holds every box the calibrated run can keep (a monotone map keeps the ranking), its floor
    # (1e-7) below conf 0.001 calibrated. `nms`: no suppression (IoU 1) and max_det above the anchor
    # count, since an untrained head ties many scores and a map that merges or splits float32 ties
    # changes which box of a tie NMS keeps. `e2e`: the top-k of predict's max_det (300): the head's
    # top-k picks max_det anchors first, so a larger max_det is not a superset of its rows.
    raw = {
        head: capture(
            yolo,
            images,
            head=head,
            imgsz=IMGSZ,
            conf=1e-7,
            all_logits=True,
            progress=False,
            **({"iou": 1.0, "max_det": 5000} if head == "nms" else {"max_det": 300}),
        )
        for head in heads
    }
    spline = _spline()
    folded = {
        "temperature": (
            write_calibrated_checkpoint(source, tmp_path / "t.pt", dict.fromkeys(heads, 2.0)),
            lambda z: 1 / (1 + np.exp(-z / 2.0)),
        ),
        "spline": (
            _write_folded_checkpoint(source, tmp_path / "s.pt", dict.fromkeys(heads, spline)),
            spline.predict_proba,
        ),
    }
    for name, (ckpt, calibrate) in folded.items():
        # what plain Ultralytics unpickles: its own and torch's classes, nothing of det_calib
        pickled = torch.serialization.get_unsafe_globals_in_checkpoint(str(ckpt))
        assert "ultralytics.nn.tasks.DetectionModel" in pickled and not [
            g for g in pickled if "det_calib" in g
        ]
        assert read_calibration_metadata(ckpt)["folded_into"] == {
            h: {"nms": "cv3", "e2e": "one2one_cv3"}[h] for h in heads
        }
        for head in heads:
            rows = _predict(YOLO(str(ckpt)), images, head)
            n = _assert_calibrated_scores(raw[head], rows, calibrate)
            assert n == sum(len(r) for r in rows) >= MIN_BOXES, (name, head, n)
