"""The panels of the pose and OBB matching pictures, built from the demo pose and OBB models' boxes on the
demo data, their ground truth and their OKS / rotated matching."""

from __future__ import annotations

import re

import numpy as np
import polars as pl
import pytest

from det_calib.capture.predictor import capture
from det_calib.data.ground_truth import load_data_yaml
from det_calib.demo import _demo_root, demo_data_yaml
from det_calib.matching.one_to_one import MatchResult
from det_calib.report.task_examples import _kept_matches, read_rgb
from det_calib.tasks import load_task_split
from det_calib.tasks.obb.labels import split_xywhr
from det_calib.tasks.obb.matching import _probiou, match_rotated
from det_calib.tasks.obb.report_panel import rotated_examples_figure, rotated_panels
from det_calib.tasks.pose.labels import split_keypoints
from det_calib.tasks.pose.matching import match_keypoints, oks
from det_calib.tasks.pose.report_panel import pose_examples_figure, pose_panels

LIMIT = 8
MAX_FIGURE_BYTES = 300_000
"""The size the project allows a figure (the tutorial's test holds its figures to it)."""


def _captured(task: str):
    ds = load_data_yaml(demo_data_yaml(task=task))
    sp = load_task_split(ds, "test", task=task, limit=LIMIT)
    boxes = capture(
        _demo_root() / f"yolo26n_shapes_{task}.pt",
        sp.images,
        head="nms",
        split="test",
        image_names=sp.image_names(),
        progress=False,
    )
    return ds, sp, boxes


@pytest.fixture(scope="module")
def pose():
    ds, sp, b = _captured("pose")
    g = sp.gt
    m = match_keypoints(
        b["image_id"],
        b["cls"],
        b["conf"],
        _kpts(b),
        g["image_id"],
        g["cls"],
        split_keypoints(sp),
        g["area"],
        g.select("x1", "y1", "x2", "y2").to_numpy(),
        g["crowd"],
    )
    return ds, sp, b, m


@pytest.fixture(scope="module")
def obb():
    ds, sp, b = _captured("obb")
    g = sp.gt
    m = match_rotated(
        b["image_id"],
        b["cls"],
        b["conf"],
        np.asarray(b["xywhr"].to_list()),
        g["image_id"],
        g["cls"],
        split_xywhr(sp),
    )
    return ds, sp, b, m


def _kpts(b: pl.DataFrame) -> np.ndarray:
    return np.stack([np.asarray(k, dtype=np.float64) for k in b["kpts"].to_list()])


def _measures(labels) -> np.ndarray:
    return np.array([float(re.search(r"(OKS|ProbIoU) (-?[\d.]+)$", t).group(2)) for t in labels])


def _check_common(panels, kept, sp, names):
    assert 0 < len(panels) <= 4
    shown = []
    for p in panels:
        name = p.title.split(":")[0]
        rows = kept.filter(pl.col("image") == name).sort("conf")
        i = int(rows["image_id"][0])
        assert p.state == ["matched" if c else "unmatched" for c in rows["correct"]]
        assert (
            p.title
            == f"{name}: {sum(rows['correct'])} matched, {rows.height - sum(rows['correct'])} not"
        )
        assert np.array_equal(p.image, read_rgb(sp.images[i]))
        assert [t.split(" ")[0] for t in p.labels] == [names[c] for c in rows["cls"]]
        assert np.allclose(
            _measures(p.labels), np.clip(rows["measure"].to_numpy(), 0, 1), atol=0.005
        )
        shown.append(rows)
    # images with both a matched and an unmatched kept box come first
    both = [r["correct"].any() and (~r["correct"]).any() for r in shown]
    assert both == sorted(both, reverse=True)
    return shown


def test_pose_panels_show_the_matching(pose):
    ds, sp, b, m = pose
    kept = _kept_matches(b, m, conf=0.25)
    assert (
        kept.height == int((b["conf"] > 0.25).sum())
        and kept["correct"].any()
        and (~kept["correct"]).any()
    )
    panels = pose_panels(b, sp, m, names=ds.names, conf=0.25)
    gt_all = split_keypoints(sp)
    for p, rows in zip(panels, _check_common(panels, kept, sp, ds.names)):
        i = int(rows["image_id"][0])
        on = np.flatnonzero(sp.gt["image_id"].to_numpy() == i)
        assert np.array_equal(p.gt_kpts, gt_all[on])
        assert np.array_equal(p.kpts, _kpts(rows))
        for k, (st, g) in enumerate(zip(p.state, p.gt_index)):
            assert (g >= 0) == (st == "matched")
            if g >= 0:  # the line goes to the ground truth matched, at the OKS written
                row = sp.gt[int(on[g])]
                assert row["cls"][0] == rows["cls"][k]
                want = oks(
                    p.kpts[k : k + 1],
                    p.gt_kpts[g : g + 1],
                    row["area"].to_numpy(),
                    row.select("x1", "y1", "x2", "y2").to_numpy(),
                )[0, 0]
                assert abs(_measures([p.labels[k]])[0] - want) <= 0.005
    png = pose_examples_figure(panels)
    assert png[:4] == b"\x89PNG" and len(png) <= MAX_FIGURE_BYTES


def test_obb_panels_show_the_matching(obb):
    ds, sp, b, m = obb
    kept = _kept_matches(b, m, conf=0.25)
    panels = rotated_panels(b, sp, m, names=ds.names, conf=0.25)
    gt_all = split_xywhr(sp)
    for p, rows in zip(panels, _check_common(panels, kept, sp, ds.names)):
        i = int(rows["image_id"][0])
        assert np.array_equal(p.gt, gt_all[sp.gt["image_id"].to_numpy() == i])
        assert np.allclose(p.boxes, np.asarray(rows["xywhr"].to_list()))
        best = _probiou(p.boxes, p.gt)  # an unmatched box shows its best same-class ProbIoU
        same = (
            rows["cls"].to_numpy()[:, None]
            == sp.gt.filter(pl.col("image_id") == i)["cls"].to_numpy()[None]
        )
        for k, st in enumerate(p.state):
            if st == "unmatched":
                want = best[k][same[k]].max() if same[k].any() else 0.0
                assert abs(_measures([p.labels[k]])[0] - max(want, 0.0)) <= 0.005
    png = rotated_examples_figure(panels)
    assert png[:4] == b"\x89PNG" and len(png) <= MAX_FIGURE_BYTES


def test_ignored_and_low_boxes_are_left_out(pose):
    ds, sp, b, m = pose
    ignore = np.zeros(len(m), bool)
    ignore[:3] = True
    m2 = MatchResult(
        correct=m.correct & ~ignore,
        iou=m.iou,
        gt_index=np.where(ignore, -1, m.gt_index),
        ignore=ignore,
    )
    kept = _kept_matches(b, m2, conf=0.5)
    want = (b["conf"].to_numpy() > 0.5) & ~ignore
    assert kept.height == int(want.sum())
    assert kept["conf"].to_list() == b["conf"].to_numpy()[want].tolist()
    assert pose_panels(b, sp, m, conf=0.999) == []


def test_bad_inputs_are_named(pose, obb):
    ds, sp, b, m = pose
    with pytest.raises(
        ValueError, match=f"a matching result of 3 rows \\(one per box\\), but got {b.height}"
    ):
        pose_panels(b.head(3), sp, m)
    both = pl.concat([b, b.with_columns(pl.lit("e2e").alias("head"))])
    with pytest.raises(ValueError, match="the boxes of one head"):
        _kept_matches(
            both,
            MatchResult(
                *(np.concatenate([a, a]) for a in (m.correct, m.iou, m.gt_index, m.ignore))
            ),
        )
    with pytest.raises(ValueError, match="a `xywhr` column"):
        rotated_panels(b, obb[1], m)
    with pytest.raises(ValueError, match="a `calibrated` column"):
        pose_panels(b, sp, m, score="calibrated")
