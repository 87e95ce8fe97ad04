"""Tests for det_calib.matching.one_to_one: parity with pycocotools, known answers, invariants, bad input."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import polars as pl
import pytest
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from det_calib.errors import InputError
from det_calib.matching.one_to_one import (
    MatchResult,
    box_iou,
    collapse_inverted,
    match_boxes,
    match_detections,
    match_table,
)

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)

# ---------------------------------------------------------------------------------------------
# Helpers


def _grid(x, step=8):
    """Round to a 1/step pixel grid: sums, differences and products stay exact in float64, so
    xyxy (ours) and xywh (pycocotools) give bit-identical IoUs and exact ties survive."""
    return np.round(np.asarray(x, dtype=np.float64) * step) / step


def make_case(seed: int, *, spread: float = 150.0, max_gt: int = 6, grid: bool = True) -> dict:
    """Random but structured detections and GT: jittered duplicates, wrong-class copies, crowd
    GTs with detections inside, background boxes, images without GT, images without detections,
    tied scores. Image and class ids are sparse; arrays are shuffled so images interleave.
    A small ``spread`` with a large ``max_gt`` packs overlapping objects: long chains of
    detections competing for the same GTs."""
    rng = np.random.default_rng(seed)
    _snap = _grid if grid else (lambda v: np.asarray(v, dtype=np.float64))
    classes = np.array([0, 3, 7])
    image_ids = rng.choice(np.arange(1, 1000), size=14, replace=False)
    gt_rows, det_rows = [], []
    for k, img in enumerate(image_ids):
        n_gt = 0 if k % 5 == 0 else int(rng.integers(1, max_gt + 1))  # some images without GT
        no_dets = k % 7 == 3  # some images without detections
        for _ in range(n_gt):
            crowd = rng.random() < 0.15
            w, h = rng.uniform(30, 90, 2) if crowd else rng.uniform(4, 50, 2)
            x, y = rng.uniform(0, spread, 2)
            c = rng.choice(classes)
            gt_rows.append((img, *_snap([x, y, x + w, y + h]), c, crowd))
            if crowd and rng.random() < 0.5:  # overlapping crowd regions: ties in crowd IoU
                gt_rows.append((img, *_snap([x + w / 4, y + h / 4, x + w, y + h]), c, True))
            if no_dets:
                continue
            for _ in range(int(rng.integers(0, 4))):  # jittered duplicates (sometimes exact)
                j = _snap(rng.normal(0, 0.15, 4) * np.array([w, h, w, h])) * (rng.random() > 0.2)
                if crowd:  # small boxes inside the crowd region
                    sx, sy = rng.uniform(0, 0.7, 2)
                    box = [x + sx * w, y + sy * h, x + (sx + 0.3) * w, y + (sy + 0.3) * h]
                else:
                    box = [x + j[0], y + j[1], x + w + j[2], y + h + j[3]]
                box = _snap(box)
                box[2:] = np.maximum(box[2:], box[:2])
                cd = c if rng.random() > 0.15 else rng.choice(classes)  # some wrong classes
                det_rows.append((img, *box, cd, rng.integers(1, 10) / 10))  # tied scores
        if not no_dets:
            for _ in range(int(rng.integers(0, 5))):  # background false positives
                x, y = rng.uniform(0, spread * 1.2, 2)
                w, h = rng.uniform(3, 60, 2)
                det_rows.append(
                    (
                        img,
                        *_snap([x, y, x + w, y + h]),
                        rng.choice(classes),
                        rng.integers(1, 10) / 10,
                    )
                )
    gt = np.array(gt_rows, dtype=object)[rng.permutation(len(gt_rows))]
    det = np.array(det_rows, dtype=object)[rng.permutation(len(det_rows))]
    return {
        "image_ids": image_ids,
        "classes": classes,
        "det_image": det[:, 0].astype(np.int64),
        "det_xyxy": det[:, 1:5].astype(np.float64),
        "det_cls": det[:, 5].astype(np.int64),
        "det_score": det[:, 6].astype(np.float64),
        "gt_image": gt[:, 0].astype(np.int64),
        "gt_xyxy": gt[:, 1:5].astype(np.float64),
        "gt_cls": gt[:, 5].astype(np.int64),
        "gt_crowd": gt[:, 6].astype(bool),
    }


def coco_reference(
    case: dict, t: float, max_dets: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """pycocotools' per-detection (matched, dtIgnore, matched GT index or -1) at one threshold."""
    gt = COCO()
    gt.dataset = {
        "images": [{"id": int(i)} for i in case["image_ids"]],
        "categories": [{"id": int(c)} for c in case["classes"]],
        "annotations": [
            {
                "id": k + 1,
                "image_id": int(img),
                "category_id": int(c),
                "bbox": [x1, y1, x2 - x1, y2 - y1],
                "area": (x2 - x1) * (y2 - y1),
                "iscrowd": int(crowd),
            }
            for k, (img, (x1, y1, x2, y2), c, crowd) in enumerate(
                zip(case["gt_image"], case["gt_xyxy"].tolist(), case["gt_cls"], case["gt_crowd"])
            )
        ],
    }
    n = len(case["det_image"])
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
        dt = gt.loadRes(
            [
                {
                    "image_id": int(img),
                    "category_id": int(c),
                    "bbox": [x1, y1, x2 - x1, y2 - y1],
                    "score": float(s),
                }
                for img, (x1, y1, x2, y2), c, s in zip(
                    case["det_image"], case["det_xyxy"].tolist(), case["det_cls"], case["det_score"]
                )
            ]
        )
        ev = COCOeval(gt, dt, "bbox")
        ev.params.iouThrs = np.array([t])
        ev.params.maxDets = [max_dets]
        ev.params.areaRng = [[0, 1e10]]
        ev.params.areaRngLbl = ["all"]
        ev.params.useCats = 1
        ev.evaluate()
    matched = np.zeros(n, dtype=bool)
    ignored = np.zeros(n, dtype=bool)
    gt_index = np.full(n, -1, dtype=np.int64)
    for e in ev.evalImgs:
        if e is None:
            continue
        ids = np.asarray(e["dtIds"], dtype=np.int64) - 1  # loadRes numbers results 1..n in order
        dtm = e["dtMatches"][0]
        matched[ids] = dtm > 0
        ignored[ids] = e["dtIgnore"][0].astype(bool)
        gt_index[ids] = np.where(dtm > 0, dtm.astype(np.int64) - 1, -1)
    return matched, ignored, gt_index


def run(case: dict, **kw) -> MatchResult:
    keys = (
        "det_image",
        "det_xyxy",
        "det_cls",
        "det_score",
        "gt_image",
        "gt_xyxy",
        "gt_cls",
        "gt_crowd",
    )
    return match_detections(*(case[k] for k in keys), **kw)


def one_image(
    dets, gts, *, det_cls=None, gt_cls=None, scores=None, crowd=None, **kw
) -> MatchResult:
    """Match boxes of a single image (class 0 unless given)."""
    dets, gts = np.asarray(dets, float).reshape(-1, 4), np.asarray(gts, float).reshape(-1, 4)
    n, m = len(dets), len(gts)
    scores = np.linspace(0.9, 0.1, n) if scores is None else scores
    det_cls = np.zeros(n, int) if det_cls is None else det_cls
    gt_cls = np.zeros(m, int) if gt_cls is None else gt_cls
    return match_detections(
        np.zeros(n, int), dets, det_cls, scores, np.zeros(m, int), gts, gt_cls, crowd, **kw
    )


# ---------------------------------------------------------------------------------------------
# Parity with pycocotools


@pytest.mark.parametrize("max_dets", [None, 3])
@pytest.mark.parametrize("t", [0.0, 0.1, 0.5, 0.75, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_parity_with_pycocotools(seed, t, max_dets):
    case = make_case(seed)
    assert case["gt_crowd"].any() and len(case["det_image"]) > 20
    r = run(case, iou_threshold=t, max_dets=max_dets)
    matched, ignored, gt_index = coco_reference(case, t, max_dets or 10_000)
    np.testing.assert_array_equal(r.correct | r.ignore, matched)
    np.testing.assert_array_equal(r.ignore, ignored)
    np.testing.assert_array_equal(r.gt_index, gt_index)
    assert not (r.correct & r.ignore).any()
    # the case exercises what it claims to: true positives, false positives and ignored boxes
    if 0.1 <= t <= 0.75:
        assert r.correct.any() and (~r.correct & ~r.ignore).any()


@pytest.mark.parametrize("t", [0.0, 0.3, 0.5])
@pytest.mark.parametrize("seed", [10, 11])
def test_parity_with_pycocotools_dense(seed, t):
    """Crowded scenes, where the greedy assignment needs several rounds."""
    case = make_case(seed, spread=25.0, max_gt=25)
    r = run(case, iou_threshold=t)
    matched, ignored, gt_index = coco_reference(case, t, 10_000)
    np.testing.assert_array_equal(r.correct | r.ignore, matched)
    np.testing.assert_array_equal(r.ignore, ignored)
    np.testing.assert_array_equal(r.gt_index, gt_index)


@pytest.mark.parametrize("seed", [20, 21])
def test_parity_with_pycocotools_off_grid(seed):
    """Arbitrary float coordinates (pycocotools recomputes x + w from xywh; one-ulp differences
    could only matter on exact ties, which random floats do not produce)."""
    case = make_case(seed, grid=False)
    r = run(case, iou_threshold=0.5)
    matched, ignored, gt_index = coco_reference(case, 0.5, 10_000)
    np.testing.assert_array_equal(r.correct | r.ignore, matched)
    np.testing.assert_array_equal(r.ignore, ignored)
    np.testing.assert_array_equal(r.gt_index, gt_index)


@pytest.mark.parametrize("seed", [0, 1])
def test_iou_column_against_pycocotools_iou(seed):
    """`iou` is the IoU with the matched GT, else the best same-class non-crowd IoU."""
    case = make_case(seed)
    r = run(case, iou_threshold=0.5)
    xywh = lambda b: np.column_stack([b[:, :2], b[:, 2:] - b[:, :2]])  # noqa: E731
    for i in range(len(r)):
        same = (case["gt_image"] == case["det_image"][i]) & (case["gt_cls"] == case["det_cls"][i])
        crowd = case["gt_crowd"].astype(np.uint8)
        ious = mask_utils.iou(xywh(case["det_xyxy"][i : i + 1]), xywh(case["gt_xyxy"]), crowd)
        ious = np.asarray(ious).reshape(-1)
        if r.correct[i]:
            assert r.iou[i] == ious[r.gt_index[i]]
        else:
            regular = same & ~case["gt_crowd"]
            assert r.iou[i] == (ious[regular].max() if regular.any() else 0.0)


def test_box_iou_matches_pycocotools():
    rng = np.random.default_rng(5)
    a, b = (
        _grid(np.hstack([xy, xy + rng.uniform(1, 30, xy.shape)]))
        for xy in rng.uniform(0, 40, (2, 6, 2))
    )
    b = b[:5]
    crowd = np.array([0, 1, 0, 0, 1], dtype=np.uint8)
    xywh = lambda x: np.column_stack([x[:, :2], x[:, 2:] - x[:, :2]])  # noqa: E731
    np.testing.assert_array_equal(
        box_iou(a, b, crowd=crowd.astype(bool)), mask_utils.iou(xywh(a), xywh(b), crowd)
    )
    np.testing.assert_array_equal(
        box_iou(a, b), mask_utils.iou(xywh(a), xywh(b), np.zeros(5, np.uint8))
    )
    assert box_iou([[0, 0, 10, 10]], [[5, 0, 15, 10]])[0, 0] == pytest.approx(50 / 150)
    assert box_iou(np.zeros((0, 4)), b).shape == (0, 5)


# ---------------------------------------------------------------------------------------------
# Known answers


def test_duplicate_detection_is_false_positive():
    r = one_image([[0, 0, 10, 10], [0, 0, 10, 10]], [[0, 0, 10, 10]], scores=[0.9, 0.8])
    assert r.correct.tolist() == [True, False]
    assert r.gt_index.tolist() == [0, -1]
    assert r.iou.tolist() == [1.0, 1.0]  # the duplicate still reports its best IoU
    assert r.ignore.tolist() == [False, False]


def test_higher_score_takes_gt_first_even_if_lower_overlaps_better():
    gt = [[0, 0, 10, 10]]
    dets = [[0, 0, 10, 10], [0, 0, 10, 6]]  # IoU 1.0 and 0.6
    r = one_image(dets, gt, scores=[0.3, 0.9])
    assert r.correct.tolist() == [False, True]
    assert r.iou.tolist() == [1.0, 0.6]


def test_each_detection_takes_its_best_free_gt():
    gts = [[0, 0, 10, 10], [6, 0, 16, 10]]
    dets = [[5, 0, 15, 10], [0, 0, 10, 10]]  # first overlaps GT1 better (9/11 vs 5/15)
    r = one_image(dets, gts, scores=[0.9, 0.8], iou_threshold=0.3)
    assert r.gt_index.tolist() == [1, 0] and r.correct.all()
    # at 0.5 the second-best GT of a later detection does not qualify
    r = one_image([[5, 0, 15, 10], [6, 0, 16, 10]], gts, scores=[0.9, 0.8], iou_threshold=0.5)
    assert r.gt_index.tolist() == [1, -1]


def test_class_mismatch_never_matches():
    r = one_image([[0, 0, 10, 10]], [[0, 0, 10, 10]], det_cls=[1], gt_cls=[0], iou_threshold=0.0)
    assert r.correct.tolist() == [False] and r.gt_index.tolist() == [-1] and r.iou.tolist() == [0.0]
    assert r.ignore.tolist() == [False]  # no (detection, GT) pair at all: still a full result


def test_other_image_never_matches():
    r = match_detections([1], [[0, 0, 10, 10]], [0], [0.9], [2], [[0, 0, 10, 10]], [0])
    assert not r.correct.any() and r.iou.tolist() == [0.0] and r.ignore.tolist() == [False]


@pytest.mark.parametrize(
    "t, box", [(0.5, [0, 0, 5, 10]), (0.25, [0, 0, 10, 2.5]), (0.75, [0, 0, 7.5, 10])]
)
def test_iou_exactly_at_threshold_matches(t, box):
    r = one_image([box], [[0, 0, 10, 10]], iou_threshold=t)
    assert r.iou[0] == t and r.correct[0]
    r = one_image([box], [[0, 0, 10, 10]], iou_threshold=np.nextafter(t, 1))
    assert not r.correct[0]


def test_threshold_one_matches_identical_boxes():
    r = one_image(
        [[1, 2, 3, 4], [1, 2, 3, 4.5]],
        [[1, 2, 3, 4], [1, 2, 3, 4.5]],
        scores=[0.9, 0.8],
        iou_threshold=1.0,
    )
    assert r.correct.tolist() == [True, True] and r.gt_index.tolist() == [0, 1]


def test_threshold_zero_takes_any_free_same_class_gt():
    """tau = 0 (LaECE_0): a box takes a free same-class GT even without overlap."""
    dets, gts = [[0, 0, 10, 10], [0, 0, 10, 10]], [[0, 0, 10, 10], [50, 50, 60, 60]]
    r = one_image(dets, gts, scores=[0.9, 0.8], iou_threshold=0.0)
    assert r.correct.tolist() == [True, True] and r.gt_index.tolist() == [0, 1]
    assert r.iou.tolist() == [1.0, 0.0]  # a matched box reports the IoU with its own GT
    r2 = one_image(dets, gts, scores=[0.9, 0.8], iou_threshold=0.1)
    assert r2.correct.tolist() == [True, False]


def test_score_ties_keep_input_order():
    r = one_image([[0, 0, 10, 10], [0, 0, 10, 10]], [[0, 0, 10, 10]], scores=[0.5, 0.5])
    assert r.correct.tolist() == [True, False]


def test_iou_ties_between_gts_go_to_the_later_gt():
    """COCO scans GTs with `iou < best: continue`, so the last of equal IoUs wins."""
    r = one_image([[5, 0, 15, 10]], [[0, 0, 10, 10], [10, 0, 20, 10]], iou_threshold=0.3)
    assert r.gt_index.tolist() == [1]


def test_crowd_gt_absorbs_detections_which_are_ignored():
    gts = [[0, 0, 100, 100], [200, 200, 210, 210]]
    dets = [[10, 10, 12, 12], [50, 50, 60, 60], [200, 200, 210, 210], [200, 200, 210, 210]]
    r = one_image(dets, gts, crowd=[True, False], scores=[0.9, 0.8, 0.7, 0.6])
    # crowd IoU = intersection / area(detection) = 1 for boxes inside, however small
    assert r.ignore.tolist() == [True, True, False, False]
    assert r.correct.tolist() == [False, False, True, False]
    assert r.gt_index.tolist() == [0, 0, 1, -1]
    assert r.iou.tolist() == [0.0, 0.0, 1.0, 1.0]  # unmatched: best non-crowd IoU


def test_crowd_ties_go_to_the_later_crowd_gt():
    gts = [[0, 0, 100, 100], [0, 0, 50, 50], [0, 0, 30, 30]]
    r = one_image([[10, 10, 20, 20], [40, 40, 50, 50]], gts, crowd=[True, True, True])
    assert r.gt_index.tolist() == [2, 1] and r.ignore.all()


def test_regular_gt_beats_crowd_gt():
    """Crowd GTs are considered only when no free regular GT qualifies."""
    gts = [[0, 0, 10, 10], [0, 0, 10, 10]]
    r = one_image([[0, 0, 10, 8], [0, 0, 10, 8]], gts, crowd=[True, False], scores=[0.9, 0.8])
    assert r.correct.tolist() == [True, False] and r.ignore.tolist() == [False, True]
    assert r.gt_index.tolist() == [1, 0]


def test_max_dets_keeps_top_per_image_and_class():
    gts = [[0, 0, 10, 10], [20, 0, 30, 10], [40, 0, 50, 10], [0, 0, 10, 10]]
    dets = [[0, 0, 10, 10], [20, 0, 30, 10], [40, 0, 50, 10], [0, 0, 10, 10]]
    r = one_image(
        dets,
        gts,
        det_cls=[0, 0, 0, 1],
        gt_cls=[0, 0, 0, 1],
        scores=[0.3, 0.9, 0.5, 0.1],
        max_dets=2,
    )
    # class 0: only the top two (0.9, 0.5) are considered; class 1 has its own budget
    assert r.correct.tolist() == [False, True, True, True]
    assert r.iou[0] == 1.0 and r.gt_index[0] == -1


def test_output_in_input_order():
    case = make_case(4)
    n = len(case["det_image"])
    case["det_score"] = np.random.default_rng(0).permutation(n) / n  # distinct scores
    r = run(case)
    perm = np.random.default_rng(1).permutation(n)
    shuffled = dict(
        case, **{k: case[k][perm] for k in ("det_image", "det_xyxy", "det_cls", "det_score")}
    )
    rp = run(shuffled)
    for f in ("correct", "iou", "gt_index", "ignore"):
        np.testing.assert_array_equal(getattr(rp, f), getattr(r, f)[perm])


def test_empty_inputs():
    r = match_detections([], [], [], [], [], [], [])
    assert (
        len(r) == 0
        and r.correct.dtype == bool
        and r.gt_index.dtype == np.int64
        and r.iou.dtype == np.float64
    )
    r = match_detections([0, 1], [[0, 0, 1, 1]] * 2, [0, 0], [0.5, 0.4], [], np.zeros((0, 4)), [])
    assert (
        r.correct.tolist() == [False, False]
        and r.iou.tolist() == [0.0, 0.0]
        and r.gt_index.tolist() == [-1, -1]
    )


def test_large_random_problem_fast_and_consistent():
    """Internal consistency on a bigger problem: one detection per GT at most, matched IoUs
    qualify, same image and class."""
    rng = np.random.default_rng(0)
    n_img, m, n = 200, 2000, 20000
    gi = rng.integers(0, n_img, m)
    gc = rng.integers(0, 4, m)
    gxy = rng.uniform(0, 500, (m, 2))
    gb = np.column_stack([gxy, gxy + rng.uniform(10, 80, (m, 2))])
    src = rng.integers(0, m, n)
    db = gb[src] + rng.normal(0, 6, (n, 4))
    db[:, 2:] = np.maximum(db[:, 2:], db[:, :2])
    r = match_detections(
        gi[src], db, gc[src], rng.random(n), gi, gb, gc, rng.random(m) < 0.05, iou_threshold=0.5
    )
    k = r.gt_index[r.correct]
    assert len(np.unique(k)) == len(k)
    assert (r.iou[r.correct] >= 0.5).all()
    assert (gi[k] == gi[src][r.correct]).all() and (gc[k] == gc[src][r.correct]).all()
    assert 0.05 < r.correct.mean() < 0.95


# ---------------------------------------------------------------------------------------------
# Invariance


@pytest.mark.parametrize(
    "transform",
    [lambda s: 2 * s, lambda s: 3.7 * s, np.sqrt, lambda s: 1 / (1 + np.exp(-10 * s + 3)), np.log],
    ids=["x2", "x3.7", "sqrt", "sigmoid", "log"],
)
def test_monotone_score_transform_changes_nothing(transform):
    for seed in (0, 1):
        case = make_case(seed)
        r = run(case)
        rt = run(dict(case, det_score=transform(case["det_score"])))
        for f in ("correct", "iou", "gt_index", "ignore"):
            np.testing.assert_array_equal(getattr(rt, f), getattr(r, f))


# ---------------------------------------------------------------------------------------------
# Tables


def _tables():
    case = make_case(2)
    n = len(case["det_image"])
    boxes = pl.DataFrame(
        {
            "image": [f"img{i}.jpg" for i in case["det_image"]],
            "image_id": case["det_image"],
            "head": ["nms"] * n,
            **{c: case["det_xyxy"][:, k] for k, c in enumerate(("x1", "y1", "x2", "y2"))},
            "cls": case["det_cls"].astype(np.int32),
            "conf": case["det_score"],
            "correct": [False] * n,  # stale values to be replaced
        }
    )
    gt = pl.DataFrame(
        {
            "image_id": case["gt_image"],
            **{c: case["gt_xyxy"][:, k] for k, c in enumerate(("x1", "y1", "x2", "y2"))},
            "cls": case["gt_cls"],
            "crowd": case["gt_crowd"],
        }
    )
    return case, boxes, gt


def test_match_table_adds_columns_in_row_order():
    case, boxes, gt = _tables()
    out = match_table(boxes, gt, iou_threshold=0.5)
    r = run(case, iou_threshold=0.5)
    assert out.columns == boxes.columns + ["iou", "ignore"]
    assert (out.schema["correct"], out.schema["iou"], out.schema["ignore"]) == (
        pl.Boolean,
        pl.Float64,
        pl.Boolean,
    )
    np.testing.assert_array_equal(out["correct"].to_numpy(), r.correct)
    np.testing.assert_array_equal(out["iou"].to_numpy(), r.iou)
    np.testing.assert_array_equal(out["ignore"].to_numpy(), r.ignore)
    assert out.drop("correct", "iou", "ignore").equals(boxes.drop("correct"))


def test_match_table_without_crowd_column_and_empty():
    _, boxes, gt = _tables()
    out = match_table(boxes, gt.drop("crowd"))
    assert not out["ignore"].any()
    empty = match_table(boxes.head(0), gt)
    assert empty.height == 0 and {"correct", "iou", "ignore"} <= set(empty.columns)


def test_match_table_bad_input():
    _, boxes, gt = _tables()
    with pytest.raises(InputError, match="conf"):
        match_table(boxes.drop("conf"), gt)
    with pytest.raises(InputError, match="GT table is missing"):
        match_table(boxes, gt.drop("cls"))
    with pytest.raises(InputError, match="heads"):
        head = pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("e2e")).otherwise("head")
        match_table(boxes.with_columns(head.alias("head")), gt)
    with pytest.raises(InputError, match="null"):
        match_table(boxes.with_columns(pl.lit(None, dtype=pl.Float64).alias("conf")), gt)
    with pytest.raises(InputError, match="box table column `cls`"):
        match_table(boxes.with_columns(pl.col("cls").cast(pl.Float64)), gt)


# ---------------------------------------------------------------------------------------------
# Bad input

GOOD = dict(
    det_image=[0, 0],
    det_xyxy=[[0, 0, 10, 10], [1, 1, 5, 5]],
    det_cls=[0, 1],
    det_score=[0.9, 0.8],
    gt_image=[0],
    gt_xyxy=[[0, 0, 10, 10]],
    gt_cls=[0],
    gt_crowd=[False],
)


@pytest.mark.parametrize(
    "arg, value",
    [
        ("det_image", [0]),
        ("det_image", [[0, 0]]),
        ("det_image", [0.0, 1.0]),
        ("det_xyxy", [[0, 0, 10, 10]]),
        ("det_xyxy", [[0, 0, 10], [1, 1, 5]]),
        ("det_xyxy", [[0, 0, 10, np.nan], [1, 1, 5, 5]]),
        ("det_xyxy", [[10, 0, 0, 10], [1, 1, 5, 5]]),
        ("det_cls", [0, 1, 2]),
        ("det_cls", [0.0, 1.5]),
        ("det_score", [0.9]),
        ("det_score", [0.9, np.nan]),
        ("det_score", [[0.9, 0.8]]),
        ("gt_image", [0, 0]),
        ("gt_xyxy", [0, 0, 10, 10]),
        ("gt_cls", []),
        ("gt_crowd", [False, True]),
        ("gt_crowd", [2]),
    ],
)
def test_bad_input_names_the_argument(arg, value):
    with pytest.raises(InputError, match=f"`{arg}`") as e:
        match_detections(**dict(GOOD, **{arg: value}))
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"iou_threshold": 1.5}, "iou_threshold"),
        ({"iou_threshold": -0.1}, "iou_threshold"),
        ({"iou_threshold": "a"}, "iou_threshold"),
        ({"max_dets": 0}, "max_dets"),
        ({"max_dets": 2.5}, "max_dets"),
    ],
)
def test_bad_options(kw, name):
    with pytest.raises(InputError, match=name):
        match_detections(**GOOD, **kw)


def test_box_iou_bad_shape():
    with pytest.raises(InputError, match="`a`"):
        box_iou([[0, 0, 1]], [[0, 0, 1, 1]])
    with pytest.raises(InputError, match="`crowd`"):
        box_iou([[0, 0, 1, 1]], [[0, 0, 1, 1]], crowd=[True, False])


_TABLE_COLUMNS = [("box table", c) for c in ("image_id", "x1", "y1", "x2", "y2", "cls", "conf")] + [
    ("GT table", c) for c in ("image_id", "x1", "y1", "x2", "y2", "cls", "crowd")
]


@pytest.mark.parametrize("table, col", _TABLE_COLUMNS)
def test_match_table_null_names_table_and_column(table, col):
    _, boxes, gt = _tables()
    null_first = pl.when(pl.int_range(pl.len()) == 0).then(None).otherwise(pl.col(col)).alias(col)
    if table == "box table":
        boxes = boxes.with_columns(null_first)
    else:
        gt = gt.with_columns(null_first)
    with pytest.raises(InputError, match=rf"^{table} column `{col}` has 1 null values$"):
        match_table(boxes, gt)


def test_box_iou_bad_second_argument_is_named():
    with pytest.raises(InputError, match="argument `b` of shape"):
        box_iou([[0, 0, 1, 1]], [[0, 0, 1]])
    with pytest.raises(InputError, match="arguments `b` and `crowd`"):
        box_iou([[0, 0, 1, 1]], [[0, 0, 1, 1]], crowd=[True, False])


def test_match_boxes_known_answer_with_inverted_boxes(caplog):
    """Both matchings of the box table on hand-computed IoUs; inverted boxes overlap nothing but
    keep their coordinates."""
    gt = pl.DataFrame(
        {
            "image_id": [0, 0],
            "cls": [0, 1],
            "x1": [0.0, 20.0],
            "y1": [0.0, 20.0],
            "x2": [10.0, 30.0],
            "y2": [10.0, 30.0],
            "crowd": [False, False],
        }
    )
    boxes = pl.DataFrame(
        {
            "image_id": [0, 0, 0, 0],
            "cls": [0, 1, 0, 1],
            "conf": [0.9, 0.8, 0.7, 0.6],
            # IoU 0.6 with GT 0; IoU 0.3 with GT 1; x-inverted copy of GT 0; y-inverted copy of GT 1
            "x1": [0.0, 20.0, 10.0, 20.0],
            "y1": [0.0, 20.0, 0.0, 30.0],
            "x2": [10.0, 30.0, 0.0, 30.0],
            "y2": [6.0, 23.0, 10.0, 20.0],
        }
    )
    with caplog.at_level("WARNING", logger="det_calib.matching.one_to_one"):
        out = match_boxes(boxes, gt, iou=0.5, loc_iou=0.1)
    assert "2 inverted box(es)" in caplog.text
    assert out["correct"].to_list() == [True, False, False, False]
    assert out["ignore"].to_list() == [False, False, False, False]
    np.testing.assert_allclose(out["iou"].to_numpy(), [0.6, 0.3, 0.0, 0.0])
    np.testing.assert_allclose(out["loc_iou"].to_numpy(), [0.6, 0.3, 0.0, 0.0])
    assert out.schema["loc_iou"] == pl.Float64
    assert out.select("x1", "y1", "x2", "y2").equals(boxes.select("x1", "y1", "x2", "y2"))
    # a box correct at loc_iou but not at iou gets its IoU; one correct at neither gets 0
    out = match_boxes(boxes, gt, iou=0.5, loc_iou=0.4)
    np.testing.assert_allclose(out["loc_iou"].to_numpy(), [0.6, 0.0, 0.0, 0.0])
    # the `iou` threshold is the one given (0.6 < 0.65: not correct, its IoU still reported)
    out = match_boxes(boxes, gt, iou=0.65, loc_iou=0.1)
    assert out["correct"].to_list() == [False] * 4
    np.testing.assert_allclose(out["iou"].to_numpy(), [0.6, 0.3, 0.0, 0.0])


def test_collapse_inverted_makes_zero_area_boxes_at_the_first_corner():
    boxes = pl.DataFrame(
        {
            "x1": [10.0, 0.0, 1.0],
            "y1": [0.0, 10.0, 1.0],
            "x2": [0.0, 10.0, 3.0],
            "y2": [10.0, 0.0, 4.0],
            "conf": [0.5, 0.4, 0.3],
        }
    )
    out = collapse_inverted(boxes)
    assert out.columns == boxes.columns
    assert out["x2"].to_list() == [10.0, 10.0, 3.0] and out["y2"].to_list() == [10.0, 10.0, 4.0]
    assert out.select("x1", "y1", "conf").equals(boxes.select("x1", "y1", "conf"))


def test_huge_sparse_ids_match_like_small_ones():
    """Image and class ids whose ranges overflow the direct (image, class) key take the
    factorised path; the groups, and so the result, stay the same."""
    case = make_case(0)
    big = dict(case)
    for k in ("det_image", "gt_image"):
        big[k] = case[k] * 2**52 - 2**61
    for k in ("det_cls", "gt_cls"):
        big[k] = case[k] * 2**40 - 5
    for t in (0.5, 0.1):
        small_r, big_r = run(case, iou_threshold=t), run(big, iou_threshold=t)
        for f in ("correct", "iou", "gt_index", "ignore"):
            np.testing.assert_array_equal(getattr(big_r, f), getattr(small_r, f))
        matched, ignored, gt_index = coco_reference(case, t, 10_000)
        np.testing.assert_array_equal(big_r.correct | big_r.ignore, matched)
        np.testing.assert_array_equal(big_r.gt_index, gt_index)


def test_sub_pixel_boxes_have_their_iou():
    """Boxes in normalised or sub-pixel units: a union below 1 is still a valid denominator."""
    np.testing.assert_allclose(
        box_iou([[0, 0, 0.5, 0.5]], [[0, 0, 0.5, 1.0], [0.25, 0, 0.75, 0.5]]), [[0.5, 1 / 3]]
    )
    r = one_image([[0, 0, 0.1, 0.1]], [[0, 0, 0.1, 0.1]], iou_threshold=0.9)
    assert r.correct.tolist() == [True] and r.iou.tolist() == [1.0]


def test_group_key_that_would_overflow_keeps_images_apart():
    """Image ids 0 and 2**34 with a class span of 2**30: the direct key (image * span + class)
    would wrap around int64 onto the same value for both images; they must stay two groups."""
    box = [[0.0, 0.0, 10.0, 10.0]]
    for det_img, gt_img in ((2**34, 0), (0, 2**34)):
        r = match_detections([det_img, 5], box * 2, [0, 2**30 - 1], [0.9, 0.8], [gt_img], box, [0])
        assert r.correct.tolist() == [False, False] and r.gt_index.tolist() == [-1, -1]
    r = match_detections([2**34, 0], box * 2, [0, 2**30 - 1], [0.9, 0.8], [2**34], box, [0])
    assert r.correct.tolist() == [True, False]


@pytest.mark.parametrize(
    "arg, value, ref",
    [
        ("det_xyxy", [[0, 0, 10, 10]] * 3, "det_image"),
        ("det_cls", [0, 1, 2], "det_image"),
        ("det_score", [0.9, 0.8, 0.7], "det_image"),
        ("gt_xyxy", [[0, 0, 10, 10]] * 2, "gt_image"),
        ("gt_cls", [0, 0], "gt_image"),
        ("gt_crowd", [False, True], "gt_image"),
    ],
)
def test_length_mismatch_names_both_arguments(arg, value, ref):
    with pytest.raises(InputError, match=f"arguments `{ref}` and `{arg}` to have the same length"):
        match_detections(**dict(GOOD, **{arg: value}))


def test_non_integer_gt_image_is_named():
    with pytest.raises(InputError, match="`gt_image`"):
        match_detections(**dict(GOOD, gt_image=[0.5]))


def test_a_single_nan_score_is_refused():
    with pytest.raises(InputError, match="`det_score` to hold no nan"):
        match_detections([0], [[0, 0, 1, 1]], [0], [np.nan], [0], [[0, 0, 1, 1]], [0])


def test_match_boxes_pairs_once_for_both_thresholds_as_two_separate_matchings():
    """match_boxes builds the pairs and their IoUs once for ``iou`` and ``loc_iou``; each threshold's
    labels are those of its own match_table (random crowded scenes: ties, crowd GT, several rounds)."""
    rng = np.random.default_rng(11)
    n, m = 3000, 400
    g_xy = rng.uniform(0, 200, size=(m, 2))
    gt = pl.DataFrame(
        {
            "image_id": rng.integers(0, 20, m),
            "cls": rng.integers(0, 3, m),
            "x1": g_xy[:, 0],
            "y1": g_xy[:, 1],
            "x2": g_xy[:, 0] + rng.uniform(5, 60, m),
            "y2": g_xy[:, 1] + rng.uniform(5, 60, m),
            "crowd": rng.uniform(size=m) < 0.05,
        }
    )
    src = rng.integers(0, m, n)  # each detection near a GT box, a few on other images/classes
    jitter = rng.normal(0, 6, size=(n, 4))
    boxes = pl.DataFrame(
        {
            "image_id": gt["image_id"].to_numpy()[src],
            "cls": np.where(rng.uniform(size=n) < 0.9, gt["cls"].to_numpy()[src], 0),
            "conf": np.round(rng.uniform(size=n), 2),  # many ties
            **{
                c: gt[c].to_numpy()[src] + jitter[:, j]
                for j, c in enumerate(("x1", "y1", "x2", "y2"))
            },
        }
    )
    out = match_boxes(boxes, gt, iou=0.5, loc_iou=0.1)
    geom = collapse_inverted(boxes)  # match_boxes' inverted-box policy
    at, loc = match_table(geom, gt, iou_threshold=0.5), match_table(geom, gt, iou_threshold=0.1)
    for col in ("correct", "iou", "ignore"):
        assert out[col].equals(at[col])
    loc_target = np.where(loc["correct"].to_numpy(), loc["iou"].to_numpy(), 0.0)
    assert np.array_equal(out["loc_iou"].to_numpy(), loc_target)
    assert 0 < out["correct"].sum() < loc["correct"].sum() < n  # the thresholds differ here
