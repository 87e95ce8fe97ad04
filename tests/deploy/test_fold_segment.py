"""Fold into segment models: plain Ultralytics (no det_calib) loads calibrated.pt of a YOLO26n-seg and gives
the original's boxes and masks, box for box and mask for mask, on both heads and with ``retina_masks`` on
and off; only the scores change, to the calibrator's. On a YOLO11n-seg (``Segment``) and a YOLO26n-seg
(``Segment26``) the fold changes the class logits alone: boxes, mask coefficients and protos are bit-equal.

A YOLO11n-seg from its yaml has no trained layers to borrow (the demo detector is a YOLO26n): with random
weights its scores cluster in near ties, which any float32 fold may round apart, so its plain-predict
comparison would test the ties, not the fold; the head-level test covers it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import NO_DET_CALIB

from det_calib.calibrators.registry import make_calibrator
from det_calib.deploy.fold import (
    _fold_calibrator,
    _fold_into_model,
    _write_folded_checkpoint,
    read_calibration_metadata,
    write_calibrated_checkpoint,
)

pytest.importorskip("ultralytics")

# One child process (det_calib blocked) predicts with every checkpoint, head and retina_masks setting and
# saves each image's boxes (x1 y1 x2 y2 conf cls) and its masks, bit-packed.
PREDICT = NO_DET_CALIB + textwrap.dedent(
    """
    import numpy as np
    spec = json.loads(sys.argv[1])
    arrays = {}
    for name, ckpt in spec["checkpoints"].items():
        for head in spec["heads"]:
            for retina in (True, False):
                model = YOLO(ckpt)
                kw = {"nms": False} if head == "e2e" else {}
                for i, img in enumerate(spec["images"]):
                    r = model.predict(img, conf=0.001, imgsz=320, retina_masks=retina, verbose=False, **kw)[0]
                    key = f"{name}/{head}/{int(retina)}/{i}"
                    arrays[key + "/boxes"] = r.boxes.data.numpy().astype(np.float64)
                    m = r.masks.data.numpy() if r.masks is not None else np.zeros((0, 1, 1))
                    arrays[key + "/shape"] = np.array(m.shape)
                    arrays[key + "/masks"] = np.packbits(m.astype(bool).reshape(-1))
    np.savez_compressed(spec["out"], **arrays)
    print(json.dumps({"det_calib_loaded": any(m.startswith("det_calib") for m in sys.modules)}))
    """
)

GLOBAL_METHODS = (
    "temperature",
    "platt",
    "spline",
    "isotonic",
)  # one map for every class: ranking kept


def _plain_predict(tmp_path, checkpoints: dict, heads, images) -> dict:
    out = tmp_path / "pred.npz"
    spec = {
        "checkpoints": {k: str(v) for k, v in checkpoints.items()},
        "heads": list(heads),
        "images": [str(p) for p in images],
        "out": str(out),
    }
    run = subprocess.run(
        [sys.executable, "-c", PREDICT, json.dumps(spec)],
        capture_output=True,
        text=True,
        env={**os.environ, "YOLO_OFFLINE": "1", "YOLO_VERBOSE": "False"},
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {"det_calib_loaded": False}
    z = np.load(out)
    return {k: z[k] for k in z.files}


def _image(pred: dict, key: str) -> tuple[np.ndarray, np.ndarray]:
    boxes, shape = pred[key + "/boxes"], tuple(pred[key + "/shape"])
    masks = np.unpackbits(pred[key + "/masks"], count=int(np.prod(shape))).reshape(shape)
    order = np.argsort(
        -boxes[:, 4], kind="stable"
    )  # conf descending (predict's order, ties as predict's)
    return boxes[order], masks[order]


def _by_box(boxes: np.ndarray, masks: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` rows in the order of their box and class (two maps may round a near tie apart)."""
    order = np.lexsort((boxes[:n, 5], boxes[:n, 3], boxes[:n, 2], boxes[:n, 1], boxes[:n, 0]))
    return boxes[:n][order], masks[:n][order]


def _synthetic_fit_data(seed=0, n=20_000):
    rng = np.random.default_rng(seed)
    z = rng.normal(-2.0, 3.0, n)
    y = rng.random(n) < 1 / (1 + np.exp(-(0.7 * z - 0.4)))
    return z, y


def _logit(p):
    p = np.asarray(p, dtype=np.float64)
    return np.log(p) - np.log1p(-p)


@pytest.fixture(scope="module")
def seg_model(tmp_path_factory, demo_seg_checkpoint):
    return Path(shutil.copy(demo_seg_checkpoint, tmp_path_factory.mktemp("seg") / "yolo26n-seg.pt"))


def _compare(pred, name: str, head: str, cal, n_images: int, floor: float = 0.05) -> int:
    """Assert that checkpoint ``name`` gives the original's boxes, classes and masks with the calibrated
    scores, for every image and both retina settings; returns the number of boxes compared."""
    compared = 0
    for retina in (1, 0):
        for i in range(n_images):
            b0, m0 = _image(pred, f"original/{head}/{retina}/{i}")
            b1, m1 = _image(pred, f"{name}/{head}/{retina}/{i}")
            # the boxes above a raw conf `floor` (both runs hold them in full: conf=0.001 is below both floors)
            n = int((b0[:, 4] > floor).sum())
            (b0, m0), (b1, m1) = _by_box(b0, m0, n), _by_box(b1, m1, n)
            expected = cal.predict_proba(_logit(b0[:, 4]))
            np.testing.assert_allclose(b1[:n, 4], expected, atol=2e-5, rtol=0)
            np.testing.assert_array_equal(b1[:n, :4], b0[:n, :4])  # boxes bit for bit
            np.testing.assert_array_equal(b1[:n, 5], b0[:n, 5])
            np.testing.assert_array_equal(m1[:n], m0[:n])  # masks pixel for pixel
            rest = pred[f"{name}/{head}/{retina}/{i}/boxes"][:, 4]
            assert (
                rest > cal.predict_proba(_logit([floor]))[0] + 2e-5
            ).sum() <= n  # no other box above the floor
            compared += n
    return compared


@pytest.mark.slow
def test_folded_segment_checkpoint_keeps_boxes_and_masks_in_plain_ultralytics(
    tmp_path, seg_model, fixture_images
):
    source = seg_model
    heads = ("nms", "e2e")
    z, y = _synthetic_fit_data()
    cals = {"T1.6": make_calibrator("temperature").fit(z, y)}
    cals["T1.6"].temperature_ = 1.6
    cals.update({m: make_calibrator(m).fit(z, y) for m in GLOBAL_METHODS[1:]})
    checkpoints = {"original": source}
    for name, cal in cals.items():
        checkpoints[name] = _write_folded_checkpoint(
            source, tmp_path / f"{name}.pt", dict.fromkeys(heads, cal)
        )
    images = fixture_images[:4]
    pred = _plain_predict(tmp_path, checkpoints, heads, images)
    for name, cal in cals.items():
        for head in heads:
            n = _compare(pred, name, head, cal, len(images))
            assert n >= 20, (name, head, n)  # not vacuous
    # the masks are real masks: neither empty nor their boxes
    b, m = _image(pred, f"original/{heads[0]}/1/0")
    area = np.maximum((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]), 1)
    fill = m.reshape(len(m), -1).sum(1) / area
    assert (fill > 0).all() and np.median(fill) < 0.9


def test_segment_temperature_checkpoint_records_its_branches(tmp_path, seg_model):
    out = write_calibrated_checkpoint(seg_model, tmp_path / "cal.pt", {"nms": 1.5, "e2e": 0.8})
    meta = read_calibration_metadata(out)
    assert meta["temperature"] == {"nms": 1.5, "e2e": 0.8}
    assert meta["folded_into"] == {"nms": "cv3", "e2e": "one2one_cv3"}
    ckpt = torch.load(out, map_location="cpu", weights_only=False)
    assert type(ckpt["model"].model[-1]).__name__ == "Segment26" and ckpt["model"].task == "segment"


@pytest.mark.fast
@pytest.mark.parametrize("cfg", ["yolo26n-seg.yaml", "yolo11n-seg.yaml"])
def test_fold_changes_only_the_class_logits_of_a_segment_head(cfg):
    from ultralytics.nn.tasks import SegmentationModel

    torch.manual_seed(0)
    model = SegmentationModel(cfg, nc=8, verbose=False).eval()
    x = torch.randn(1, 3, 320, 320)
    z, y = _synthetic_fit_data()
    platt = make_calibrator("platt").fit(z, y)
    a, b = platt.affine_params(8)
    with torch.no_grad():
        (_, proto0), raw0 = model(x)
        _fold_into_model(model, {"nms": 2.0})
        _fold_calibrator(model, "e2e" if "26" in cfg else "nms", platt)
        (_, proto1), raw1 = model(x)
    branches = (
        [("one2many", 2.0, "nms"), ("one2one", 1.0, "e2e")] if "26" in cfg else [(None, 2.0, "nms")]
    )
    for key, t, head in branches:
        r0, r1 = (raw0[key], raw1[key]) if key else (raw0, raw1)
        want = r0["scores"] / t
        if head == ("e2e" if "26" in cfg else "nms"):
            want = want * torch.tensor(a, dtype=torch.float32).view(1, -1, 1) + torch.tensor(
                b
            ).float().view(1, -1, 1)
        torch.testing.assert_close(r1["scores"], want, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(r1["boxes"], r0["boxes"], rtol=0, atol=0)
        torch.testing.assert_close(r1["mask_coefficient"], r0["mask_coefficient"], rtol=0, atol=0)
    torch.testing.assert_close(proto1, proto0, rtol=0, atol=0)
