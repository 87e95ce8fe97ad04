"""Reliability by size: the bins (known partitions), the figures of each bin against the metrics
computed directly on its boxes, the LaECE_0 matching that spans every box, the re-ranked matching
of a size map, and the record's JSON round trip."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from det_calib.calibrators.size import SizePlattScaler
from det_calib.calibrators.temperature import TemperatureScaler
from det_calib.codec import decode
from det_calib.data.box_view import BoxView
from det_calib.evaluation.by_size import size_figures
from det_calib.evaluation.operating import OperatingPoints
from det_calib.metrics import calibration as metrics
from det_calib.metrics.operating_point import laece0
from det_calib.metrics.size_bins import SIZE_BINS
from det_calib.record.size_record import SizeFigures

pytestmark = pytest.mark.fast


def test_the_bins_partition_the_boxes_at_cocos_thresholds():
    side = np.array([10.0, 31.99, 32.0, 95.9, 96.0, 400.0])
    xyxy = np.column_stack([np.zeros(6), np.zeros(6), side, side])
    w, h = np.full(6, 640), np.full(6, 480)
    coco = [b for b in SIZE_BINS if b.scheme == "coco"]
    got = np.array([b.mask(xyxy, w, h) for b in coco])
    assert (got.sum(axis=0) == 1).all()  # one bin each
    assert [coco[int(i)].name for i in got.argmax(axis=0)] == [
        "small",
        "small",
        "medium",
        "medium",
        "large",
        "large",
    ]
    rel = [b for b in SIZE_BINS if b.scheme == "relative"]
    # the same 40-pixel box is large on a 64x64 crop and small on a 4K frame
    box = np.array([[0.0, 0.0, 40.0, 40.0]])
    assert rel[2].mask(box, np.array([64]), np.array([64]))[0]
    assert rel[0].mask(box, np.array([3840]), np.array([2160]))[0]
    assert SIZE_BINS[1].name == "medium" and SIZE_BINS[1].label == "medium (32²–96²)"


def _scene(seed=0, n_img=60):
    """Images of 640x480 with GT boxes of every size and detections near them (some false)."""
    rng = np.random.default_rng(seed)
    gt, det = [], []
    for i in range(n_img):
        for _ in range(rng.integers(2, 6)):
            s = float(rng.choice([16, 60, 200])) * rng.uniform(0.8, 1.2)
            x, y = rng.uniform(0, 640 - s), rng.uniform(0, 480 - s)
            k = int(rng.integers(0, 3))
            gt.append((i, x, y, x + s, y + s, k))
            j = rng.normal(0, s * 0.08, 4)
            z = rng.normal(0.5 if s > 40 else 1.5, 1.5)  # small boxes over-confident
            det.append((i, x + j[0], y + j[1], x + s + j[2], y + s + j[3], k, z))
        for _ in range(rng.integers(0, 3)):  # false positives
            s = float(rng.choice([16, 60, 200]))
            x, y = rng.uniform(0, 640 - s), rng.uniform(0, 480 - s)
            det.append((i, x, y, x + s, y + s, int(rng.integers(0, 3)), rng.normal(-1, 1.5)))
    g = pl.DataFrame(
        gt, schema=["image_id", "x1", "y1", "x2", "y2", "cls"], orient="row"
    ).with_columns(crowd=pl.lit(False))
    d = np.array(det)
    from det_calib.matching.one_to_one import match_detections

    conf = 1 / (1 + np.exp(-d[:, 6]))
    r = match_detections(
        d[:, 0].astype(int),
        d[:, 1:5],
        d[:, 5].astype(int),
        conf,
        g["image_id"].to_numpy(),
        g.select("x1", "y1", "x2", "y2").to_numpy(),
        g["cls"].to_numpy(),
        np.zeros(g.height, bool),
        iou_threshold=0.5,
    )
    view = BoxView(
        logit=d[:, 6],
        conf=conf,
        correct=r.correct,
        cls=d[:, 5].astype(int),
        image_id=d[:, 0].astype(int),
        xyxy=d[:, 1:5],
        extra={"img_w": np.full(len(d), 640), "img_h": np.full(len(d), 480)},
        log_area=np.log(np.maximum((d[:, 3] - d[:, 1]) * (d[:, 4] - d[:, 2]), 1e-8) / (640 * 480)),
    )
    return view, g


def test_each_bin_is_its_boxes_figures():
    view, gt = _scene()
    op = OperatingPoints(view, gt, conf=(0.25,), ece_bins=15, laece_bins=25, n_boot=50, seed=0)
    figs = size_figures(op, view)
    assert [(f.scheme, f.bin) for f in figs] == [(b.scheme, b.name) for b in SIZE_BINS]
    total = 0
    for f, b in zip(figs, SIZE_BINS):
        m = b.mask(view.xyxy, 640, 480)
        keep = m & (view.conf > 0.25)
        assert f.boxes_before == f.boxes_after == int(keep.sum())
        if not keep.any():
            continue
        assert f.ece_before == pytest.approx(
            metrics.ece(view.conf[keep], view.correct[keep], n_bins=15)
        )
        assert f.ece_before == f.ece_after  # the raw view scored by nothing
        for v, ci in ((f.ece_before, f.ece_before_ci), (f.laece0_before, f.laece0_before_ci)):
            if ci is not None:
                assert ci[0] <= v <= ci[1]
        total += int(keep.sum()) if b.scheme == "coco" else 0
    assert total == int((view.conf > 0.25).sum())
    # a bin holding every box is the head's own LaECE_0, and equals the reference function on them
    every = op.targets.within(np.ones(view.n, bool)).laece(view.conf, threshold=0.25)
    assert every == pytest.approx(op.operating(view, intervals=False)[0].laece0)
    ref = laece0(
        view.image_id,
        view.xyxy,
        view.cls,
        view.conf,
        gt["image_id"].to_numpy(),
        gt.select("x1", "y1", "x2", "y2").to_numpy(),
        gt["cls"].to_numpy(),
        threshold=0.25,
    )
    assert every == pytest.approx(ref)


def test_the_size_map_rescoring_matches_in_its_own_order_and_helps_small_boxes():
    view, gt = _scene(seed=1, n_img=150)
    cal = SizePlattScaler().fit(view.logit, view.correct, log_area=view.log_area)
    assert cal.c_ > 0  # small boxes were over-confident: their scores come down
    scored = view.scored(cal)
    op = OperatingPoints(view, gt, conf=(0.25,), ece_bins=15, laece_bins=25, n_boot=20, seed=0)
    t = op.targets_for(scored)
    assert (
        t is not op.targets and op.targets_for(scored) is t
    )  # re-matched once, in the calibrated order
    ref = laece0(
        view.image_id,
        view.xyxy,
        view.cls,
        scored.conf,
        gt["image_id"].to_numpy(),
        gt.select("x1", "y1", "x2", "y2").to_numpy(),
        gt["cls"].to_numpy(),
        threshold=0.25,
    )
    assert t.laece(scored.conf, threshold=0.25) == pytest.approx(ref)
    small = size_figures(op, scored)[0]
    assert small.bin == "small" and small.ece_after < small.ece_before


def test_the_records_round_trip():
    view, gt = _scene()
    op = OperatingPoints(view, gt, conf=(0.25,), ece_bins=15, laece_bins=25, n_boot=20, seed=0)
    figs = size_figures(op, view.scored(None))
    back = decode(list[SizeFigures], [f.to_dict() for f in figs], "by_size.nms")
    assert back == figs
    assert figs[2].hi is None and math.isinf(SIZE_BINS[2].hi)
    from det_calib.errors import InputError

    with pytest.raises(InputError, match=r"by_size\.nms\[0\]\.ece_after"):
        decode(list[SizeFigures], [{**figs[0].to_dict(), "ece_after": "x"}], "by_size.nms")


def test_operating_points_score_the_same_scores_once_with_the_same_figures():
    """OperatingPoints keeps the figures of scores it has scored (a run asks for the raw and the deployed
    scores twice): scores equal bit for bit (a view scored again by the same map) get the same figures as
    a fresh evaluator's; other scores, and the same scores without intervals, are scored anew."""
    view, gt = _scene(seed=2)
    cal = TemperatureScaler(kind="sigmoid").fit(view.logit, view.correct)
    kw = dict(conf=(0.25, 0.5), ece_bins=15, laece_bins=25, n_boot=30, seed=0)
    op = OperatingPoints(view, gt, **kw)
    raw, scaled = op.operating(view), op.operating(view.scored(cal))
    assert raw != scaled  # the temperature moves the kept sets' figures
    assert op.operating(view.scored(cal)) == scaled  # a new view, the same scores
    assert op.operating(view.scored(None)) == raw
    for v, figs in ((view, raw), (view.scored(cal), scaled)):  # a fresh evaluator's figures
        assert OperatingPoints(view, gt, **kw).operating(v) == figs
    bare = op.operating(view, intervals=False)
    assert all(f.ece_ci is None for f in bare) and [f.ece for f in bare] == [f.ece for f in raw]
