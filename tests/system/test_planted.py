"""A planted affine map folded into the demo detector is recovered by Platt from a calibration run.

Definition: fold ``P(z) = A z + B`` (A = 1.5, B = -0.7) into the demo detector's ``nms`` head and
capture the same calibration images with the raw and the planted model (the planted capture at
the equivalent floor ``sigmoid(P(logit(0.001)))``, so both hold the same boxes: a shared monotone
map changes neither NMS nor the top-k). Platt fits ``(a0, b0)`` on the raw logits and ``(a1, b1)``
on the planted ones. The planted model needs ``sigmoid(a1 P(z) + b1) = sigmoid(a0 z + b0)``, so the
recovered plant is ``A' = a0 / a1``, ``B' = (b0 - b1) / a1``.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from det_calib.calibrators.affine import ClassAffineScaler, PlattScaler
from det_calib.capture.predictor import capture
from det_calib.data.ground_truth import load_data_yaml, load_split
from det_calib.deploy.fold import _write_folded_checkpoint
from det_calib.matching.one_to_one import match_boxes

A, B = 1.5, -0.7
N_IMAGES = 120


@pytest.fixture(scope="module")
def calib_split():
    from det_calib import demo

    return load_split(load_data_yaml(demo.demo_data_yaml()), "calib", limit=N_IMAGES)


def test_platt_recovers_a_planted_affine_map(tmp_path, demo_model_path, calib_split):
    planted = PlattScaler.from_dict(
        {"format": "det_calib.PlattScaler", "version": 1, "a": A, "b": B}
    )
    ckpt = _write_folded_checkpoint(demo_model_path, tmp_path / "planted.pt", {"nms": planted})
    floor = 0.001
    floor_planted = 1 / (1 + math.exp(-(A * math.log(floor / (1 - floor)) + B)))
    fits = {}
    for name, model, fl in (("raw", demo_model_path, floor), ("planted", ckpt, floor_planted)):
        raw = capture(
            str(model), calib_split.images, head="nms", conf=fl, split="calib", progress=False
        )
        boxes = match_boxes(raw, calib_split.gt, iou=0.5, loc_iou=0.1).filter(~pl.col("ignore"))
        fits[name] = (
            PlattScaler().fit(boxes["logit"].to_numpy(), boxes["correct"].to_numpy()),
            boxes.height,
        )
        if name == "raw":
            raw_boxes = boxes
    (p0, n0), (p1, n1) = fits["raw"], fits["planted"]
    assert abs(n0 - n1) <= max(2, n0 // 1000)  # the same boxes, up to float32 ties at the floor
    a_rec, b_rec = p0.a_ / p1.a_, (p0.b_ - p1.b_) / p1.a_
    assert a_rec == pytest.approx(A, rel=0.02)
    assert b_rec == pytest.approx(B, rel=0.02)

    # Per class, on the same real boxes: plant A_c z + B_c per class (what folding per-class maps
    # does to these boxes' logits; folding them into the model would also change which class wins
    # an anchor, so the box sets would differ), keep only 30 boxes of the last class, fit per-class
    # Platt with the weakest grid shrinkage (lam = 1 pseudo-box) on raw and planted logits and
    # recover A_c = a0_c / a1_c as above. The penalty acts in each fit's own parameter space, so
    # recovery is exact only as lam -> 0: classes with >= 400 boxes come back to 3%, the 30-box
    # class is pulled toward the global map.
    z, y, k = (raw_boxes[c].to_numpy() for c in ("logit", "correct", "cls"))
    g = raw_boxes["image_id"].to_numpy()
    small = int(k.max())
    keep = (k != small) | (np.cumsum(k == small) <= 30)
    z, y, k, g = z[keep], y[keep], k[keep], g[keep]
    a_c = np.linspace(0.7, 1.8, small + 1)
    b_c = np.linspace(-0.8, 0.5, small + 1)
    zp = a_c[k] * z + b_c[k]
    c0 = ClassAffineScaler(kind="platt", shrinkage=1.0).fit(z, y, classes=k)
    c1 = ClassAffineScaler(kind="platt", shrinkage=1.0).fit(zp, y, classes=k)
    a_rec_c = c0.a_ / c1.a_
    big = np.bincount(k) >= 400
    assert big.sum() >= 3
    np.testing.assert_allclose(a_rec_c[big], a_c[big], rtol=0.03)
    # the 30-box class is shrunk toward the global map: its recovered slope lies between its plant
    # and the global recovery, pulled further from the plant than any big class's (whose data
    # outweigh the one pseudo-box); a stronger shrinkage (100 pseudo-boxes) takes it most of the way
    a_glob = c0.global_a_ / c1.global_a_
    lo, hi = sorted((a_glob, a_c[small]))
    assert lo < a_rec_c[small] < hi
    pull = abs(a_rec_c[small] - a_c[small]) / a_c[small]
    assert pull > np.max(np.abs(a_rec_c[big] - a_c[big]) / a_c[big])
    s0 = ClassAffineScaler(kind="platt", shrinkage=100.0).fit(z, y, classes=k)
    s1 = ClassAffineScaler(kind="platt", shrinkage=100.0).fit(zp, y, classes=k)
    a_strong = s0.a_[small] / s1.a_[small]
    assert abs(a_strong - a_glob) < abs(a_strong - a_c[small])
