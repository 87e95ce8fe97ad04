"""Mask-IoU one-to-one matching: parity with pycocotools COCOeval(iouType="segm")."""

from __future__ import annotations

import contextlib
import io

import cv2
import numpy as np
import pytest
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from det_calib.data import MatchingRule
from det_calib.data.ground_truth import load_data_yaml
from det_calib.demo.shapes import CLASS_NAMES
from det_calib.errors import InputError
from det_calib.tasks import get_task, load_task_split
from det_calib.tasks.segment.demo_labels import write_segment_split
from det_calib.tasks.segment.labels import segment_rles
from det_calib.tasks.segment.matching import (
    _mask_iou,
    _match_mask_table,
    match_masks,
)

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)

H, W = 40, 48


def _rle(mask: np.ndarray) -> dict:
    return mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))


def _rect(x1, y1, x2, y2, h=H, w=W) -> np.ndarray:
    m = np.zeros((h, w), np.uint8)
    m[y1:y2, x1:x2] = 1
    return m


def _random_mask(rng, h=H, w=W) -> np.ndarray:
    m = np.zeros((h, w), np.uint8)
    cx, cy = int(rng.integers(0, w)), int(rng.integers(0, h))
    a, b = int(rng.integers(2, 14)), int(rng.integers(2, 14))
    if rng.random() < 0.5:
        cv2.ellipse(m, (cx, cy), (a, b), float(rng.uniform(0, 180)), 0, 360, 1, -1)
    else:
        m[max(cy - b, 0) : cy + b, max(cx - a, 0) : cx + a] = 1
    return m


def _shift(m: np.ndarray, dx: int, dy: int) -> np.ndarray:
    out = np.zeros_like(m)
    h, w = m.shape
    ys, xs = slice(max(dy, 0), h + min(dy, 0)), slice(max(dx, 0), w + min(dx, 0))
    out[ys, xs] = m[max(-dy, 0) : h - max(dy, 0), max(-dx, 0) : w - max(dx, 0)]
    return out


def make_case(seed: int) -> dict:
    """Random images with GT masks (some crowd), detections that are shifted copies of GTs
    (sometimes of the wrong class, sometimes several per GT) and random false masks; tied
    scores; images with GT only, detections only, or nothing of a class."""
    rng = np.random.default_rng(seed)
    gi, gc, gm, gk, di, dc, dm, ds = [], [], [], [], [], [], [], []
    for img in range(int(rng.integers(1, 6))):
        for _ in range(int(rng.integers(0, 6))):
            m, c = _random_mask(rng), int(rng.integers(0, 3))
            if not m.any():
                continue
            gi.append(img), gc.append(c), gm.append(m), gk.append(bool(rng.random() < 0.15))
            for _ in range(int(rng.choice([0, 1, 1, 2, 3]))):
                dm.append(_shift(m, *(int(v) for v in rng.integers(-4, 5, size=2))))
                di.append(img), dc.append(c if rng.random() < 0.8 else int(rng.integers(0, 3)))
        for _ in range(int(rng.integers(0, 4))):
            dm.append(_random_mask(rng)), di.append(img), dc.append(int(rng.integers(0, 3)))
    scores = (
        rng.choice([0.2, 0.5, 0.5, 0.9], size=len(dm))
        if seed % 2
        else rng.uniform(0, 1, size=len(dm))
    )
    ds = scores.tolist()
    return {
        "det_image": np.array(di, np.int64),
        "det_cls": np.array(dc, np.int64),
        "det_score": np.array(ds),
        "det_rles": [_rle(m) for m in dm],
        "gt_image": np.array(gi, np.int64),
        "gt_cls": np.array(gc, np.int64),
        "gt_rles": [_rle(m) for m in gm],
        "gt_crowd": np.array(gk, bool),
        "sizes": dict.fromkeys(set(gi) | set(di), (H, W)) or {0: (H, W)},
    }


def coco_segm_reference(case: dict, t: float, max_dets: int):
    """pycocotools' per-detection (matched, dtIgnore, matched GT index or -1) at one threshold."""
    n = len(case["det_image"])
    matched, ignored, gt_index = np.zeros(n, bool), np.zeros(n, bool), np.full(n, -1, np.int64)
    if n == 0:
        return matched, ignored, gt_index

    def enc(r):
        return {"size": list(r["size"]), "counts": r["counts"].decode()}

    gt = COCO()
    gt.dataset = {
        "images": [{"id": int(i), "height": h, "width": w} for i, (h, w) in case["sizes"].items()],
        "categories": [{"id": int(c)} for c in np.union1d(case["gt_cls"], case["det_cls"])],
        "annotations": [
            {
                "id": k + 1,
                "image_id": int(img),
                "category_id": int(c),
                "segmentation": enc(r),
                "area": float(mask_utils.area(r)),
                "bbox": mask_utils.toBbox(r).tolist(),
                "iscrowd": int(crowd),
            }
            for k, (img, c, r, crowd) in enumerate(
                zip(case["gt_image"], case["gt_cls"], case["gt_rles"], case["gt_crowd"])
            )
        ],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
        dt = gt.loadRes(
            [
                {
                    "image_id": int(img),
                    "category_id": int(c),
                    "segmentation": enc(r),
                    "score": float(s),
                }
                for img, c, r, s in zip(
                    case["det_image"], case["det_cls"], case["det_rles"], case["det_score"]
                )
            ]
        )
        ev = COCOeval(gt, dt, "segm")
        ev.params.iouThrs = np.array([t])
        ev.params.maxDets = [max_dets]
        ev.params.areaRng = [[0, 1e10]]
        ev.params.areaRngLbl = ["all"]
        ev.evaluate()
    for e in ev.evalImgs:
        if e is None:
            continue
        ids = np.asarray(e["dtIds"], dtype=np.int64) - 1
        dtm = e["dtMatches"][0]
        matched[ids] = dtm > 0
        ignored[ids] = e["dtIgnore"][0].astype(bool)
        gt_index[ids] = np.where(dtm > 0, dtm.astype(np.int64) - 1, -1)
    return matched, ignored, gt_index


def run(case: dict, **kw):
    keys = (
        "det_image",
        "det_cls",
        "det_score",
        "det_rles",
        "gt_image",
        "gt_cls",
        "gt_rles",
        "gt_crowd",
    )
    return match_masks(*(case[k] for k in keys), **kw)


def _assert_parity(case, t, max_dets):
    ref_m, ref_i, ref_g = coco_segm_reference(case, t, max_dets)
    r = run(case, iou_threshold=t, max_dets=max_dets)
    # pycocotools' dtMatches holds the crowd GT an ignored detection fell on, as a match
    np.testing.assert_array_equal(r.correct | r.ignore, ref_m)
    np.testing.assert_array_equal(r.ignore, ref_i)
    np.testing.assert_array_equal(r.gt_index, ref_g)
    assert not (r.correct & r.ignore).any()
    return r


@pytest.mark.parametrize("seed", range(24))
@pytest.mark.parametrize(("t", "max_dets"), [(0.5, 100), (0.75, 100), (0.3, 2), (0.95, 100)])
def test_parity_with_pycocotools_segm(seed, t, max_dets):
    case = make_case(seed)
    r = _assert_parity(case, t, max_dets)
    assert len(r) == len(case["det_image"])


def test_cases_cover_crowd_ties_and_empty_images():
    """The random cases are not vacuous: crowd absorptions, tied scores, matches and misses."""
    n_ign = n_ok = n_bad = n_tie = 0
    for seed in range(24):
        case = make_case(seed)
        r = run(case)
        n_ign += r.ignore.sum()
        n_ok += r.correct.sum()
        n_bad += (~r.correct & ~r.ignore).sum()
        n_tie += len(case["det_score"]) - len(np.unique(case["det_score"]))
    assert n_ign >= 3 and n_ok >= 30 and n_bad >= 30 and n_tie >= 20


def test_touching_objects_and_iou_ties_go_to_the_later_gt():
    """Two GTs sharing an edge; a detection covering both has IoU 0.5 with each: the later GT
    takes it (COCO's scan), the second detection gets the other."""
    a, b = _rect(4, 4, 14, 14), _rect(14, 4, 24, 14)
    case = {
        "det_image": np.array([0, 0]),
        "det_cls": np.array([1, 1]),
        "det_score": np.array([0.9, 0.8]),
        "det_rles": [_rle(a | b), _rle(a)],
        "gt_image": np.array([0, 0]),
        "gt_cls": np.array([1, 1]),
        "gt_rles": [_rle(a), _rle(b)],
        "gt_crowd": np.array([False, False]),
        "sizes": {0: (H, W)},
    }
    r = _assert_parity(case, 0.5, 100)
    assert r.correct.tolist() == [True, True] and r.gt_index.tolist() == [1, 0]
    assert r.iou.tolist() == [0.5, 1.0]


def test_crowd_region_absorbs_detections_by_intersection_over_detection():
    crowd = _rect(0, 0, 24, 40)
    inside, half = _rect(2, 2, 10, 10), _rect(16, 2, 32, 10)
    person = _rect(2, 20, 12, 30)
    case = {
        "det_image": np.zeros(4, np.int64),
        "det_cls": np.zeros(4, np.int64),
        "det_score": np.array([0.9, 0.8, 0.7, 0.6]),
        "det_rles": [_rle(person), _rle(inside), _rle(half), _rle(inside)],
        "gt_image": np.zeros(2, np.int64),
        "gt_cls": np.zeros(2, np.int64),
        "gt_rles": [_rle(person), _rle(crowd)],
        "gt_crowd": np.array([False, True]),
        "sizes": {0: (H, W)},
    }
    r = _assert_parity(case, 0.5, 100)
    # the person first; then two detections inside the crowd (i/det = 1) are ignored; the one half
    # inside (8 of 16 columns) sits exactly at 0.5 and is ignored too
    assert r.correct.tolist() == [True, False, False, False]
    assert r.ignore.tolist() == [False, True, True, True]
    assert r.gt_index.tolist() == [0, 1, 1, 1]


def test_empty_inputs():
    e = np.zeros(0, np.int64)
    r = match_masks(e, e, np.zeros(0), [], e, e, [])
    assert len(r) == 0
    m = _rle(_rect(0, 0, 5, 5))
    r = match_masks([0], [0], [0.5], [m], e, e, [])
    assert r.correct.tolist() == [False] and r.gt_index.tolist() == [-1]
    r = match_masks(e, e, np.zeros(0), [], [0], [0], [m])
    assert len(r) == 0


def test_mask_iou_is_pycocotools_iou():
    rng = np.random.default_rng(3)
    a = [_rle(_random_mask(rng)) for _ in range(5)]
    b = [_rle(_random_mask(rng)) for _ in range(4)]
    crowd = [0, 1, 0, 1]
    np.testing.assert_array_equal(
        _mask_iou(a, b, crowd=crowd), np.asarray(mask_utils.iou(a, b, crowd))
    )
    assert _mask_iou(a, []).shape == (5, 0)


def test_bad_input_is_named():
    m = _rle(_rect(0, 0, 5, 5))
    small = _rle(np.ones((10, 10), np.uint8))
    with pytest.raises(InputError, match="different sizes"):
        match_masks([0], [0], [0.5], [small], [0], [0], [m])
    with pytest.raises(InputError, match="`det_rles` to have the length of `det_image`"):
        match_masks([0, 0], [0, 0], [0.5, 0.4], [m], [0], [0], [m])
    with pytest.raises(InputError, match="`gt_rles` to hold RLE dicts"):
        match_masks([0], [0], [0.5], [m], [0], [0], [np.ones((3, 3))])
    with pytest.raises(InputError, match="no nan"):
        match_masks([0], [0], [float("nan")], [m], [0], [0], [m])
    with pytest.raises(InputError, match="iou_threshold"):
        match_masks([0], [0], [0.5], [m], [0], [0], [m], iou_threshold=1.5)
    with pytest.raises(InputError, match="one size"):
        _mask_iou([m], [small])


def test_uncompressed_rles_are_accepted():
    mask = _rect(3, 3, 9, 9)
    fortran = mask.reshape(-1, order="F")
    runs, cur, k = [], 0, 0
    for v in fortran:
        if v != cur:
            runs.append(k)
            cur, k = v, 0
        k += 1
    runs.append(k)
    unc = {"size": [H, W], "counts": runs}
    r = match_masks([0], [0], [0.5], [unc], [0], [0], [_rle(mask)])
    assert r.correct.tolist() == [True] and r.iou.tolist() == [1.0]


@pytest.fixture(scope="module")
def demo_split(tmp_path_factory):
    root = tmp_path_factory.mktemp("segdemo")
    write_segment_split(root, "test", 10)
    names = "\n".join(f"  {i}: {n}" for i, n in enumerate(CLASS_NAMES))
    (root / "data.yaml").write_text(
        f"path: {root}\nval: images/test\ntest: images/test\nnames:\n{names}\n"
    )
    return load_task_split(load_data_yaml(root / "data.yaml"), "test", task="segment")


def _demo_case(split, seed):
    """Synthetic detections on the demo's rendered polygon masks: eroded, dilated, shifted and
    duplicated copies of GT masks (some with the wrong class), and masks of other images' objects."""
    rng = np.random.default_rng(seed)
    gt_rles = segment_rles(split)
    di, dc, dr = [], [], []
    kernel = np.ones((3, 3), np.uint8)
    for img, c, r in zip(split.gt["image_id"].to_list(), split.gt["cls"].to_list(), gt_rles):
        m = mask_utils.decode(r)
        for _ in range(int(rng.choice([0, 1, 1, 2]))):
            op = rng.integers(4)
            d = (
                cv2.erode(m, kernel)
                if op == 0
                else cv2.dilate(m, kernel, iterations=2)
                if op == 1
                else _shift(m, *(int(v) for v in rng.integers(-6, 7, size=2)))
                if op == 2
                else m
            )
            (
                di.append(img),
                dc.append(c if rng.random() < 0.85 else int(rng.integers(0, 8))),
                dr.append(_rle(d)),
            )
    n_img = len(split.images)
    for _ in range(15):  # an object of another image pasted at its place (sizes permitting)
        j = int(rng.integers(len(gt_rles)))
        img = int(rng.integers(n_img))
        if tuple(gt_rles[j]["size"]) == (int(split.sizes[img][1]), int(split.sizes[img][0])):
            di.append(img), dc.append(int(split.gt["cls"][j])), dr.append(gt_rles[j])
    crowd = np.zeros(split.gt.height, bool)
    crowd[rng.choice(split.gt.height, size=3, replace=False)] = True
    sizes = {i: (int(h), int(w)) for i, (w, h) in enumerate(split.sizes)}
    return {
        "det_image": np.array(di, np.int64),
        "det_cls": np.array(dc, np.int64),
        "det_score": np.round(rng.uniform(0, 1, len(di)), 1),
        "det_rles": dr,
        "gt_image": split.gt["image_id"].to_numpy(),
        "gt_cls": split.gt["cls"].to_numpy().astype(np.int64),
        "gt_rles": gt_rles,
        "gt_crowd": crowd,
        "sizes": sizes,
    }


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("t", [0.5, 0.75, 0.9])
def test_parity_on_demo_polygons(demo_split, seed, t):
    case = _demo_case(demo_split, seed)
    r = _assert_parity(case, t, 100)
    assert r.correct.any() and (~r.correct).any()


def test_match_mask_table_on_the_demo_split(demo_split):
    import polars as pl

    case = _demo_case(demo_split, 0)
    boxes = pl.DataFrame(
        {
            "image_id": case["det_image"],
            "cls": case["det_cls"],
            "conf": case["det_score"],
            "segm": [r["counts"] for r in case["det_rles"]],
        },
        schema_overrides={"segm": pl.Binary},
    )
    out = _match_mask_table(boxes, demo_split.gt, demo_split.sizes)
    r = match_masks(
        case["det_image"],
        case["det_cls"],
        case["det_score"],
        case["det_rles"],
        case["gt_image"],
        case["gt_cls"],
        case["gt_rles"],
        demo_split.gt["crowd"].to_numpy(),
    )
    assert out["correct"].to_list() == r.correct.tolist() and out["iou"].to_list() == r.iou.tolist()
    with pytest.raises(InputError, match="rows without a mask"):
        _match_mask_table(
            boxes,
            demo_split.gt.with_columns(pl.lit(None, dtype=pl.Binary).alias("segm")),
            demo_split.sizes,
        )


def test_match_boxes_by_masks_at_two_thresholds(demo_split):
    import polars as pl

    case = _demo_case(demo_split, 1)
    boxes = pl.DataFrame(
        {
            "image_id": case["det_image"],
            "cls": case["det_cls"],
            "conf": case["det_score"],
            "segm": [r["counts"] for r in case["det_rles"]],
        },
        schema_overrides={"segm": pl.Binary},
    )
    out = get_task("segment").match(boxes, demo_split, MatchingRule("mask"), iou=0.5, loc_iou=0.1)
    at5 = _match_mask_table(boxes, demo_split.gt, demo_split.sizes, iou_threshold=0.5)
    at1 = _match_mask_table(boxes, demo_split.gt, demo_split.sizes, iou_threshold=0.1)
    assert out["correct"].to_list() == at5["correct"].to_list()
    assert out["ignore"].to_list() == at5["ignore"].to_list()
    expect = np.where(at1["correct"].to_numpy(), at1["iou"].to_numpy(), 0.0)
    np.testing.assert_array_equal(out["loc_iou"].to_numpy(), expect)
    assert (out["loc_iou"] > 0).sum() > out[
        "correct"
    ].sum()  # the looser matching labels more boxes
