"""det_calib's COCO mAP engine (det_calib/evaluation/coco_engine.py) against pycocotools, the reference.

COCOeval's whole ``precision`` and ``recall`` arrays (every IoU threshold, recall point, class,
area range and maxDets entry) must be equal, bit for bit, on planted sets
(crowd boxes, score and IoU ties, empty images, maxDets below a group's detections, boxes in
every area range, objects and detections of exactly 32² and 96² px² where the closed ranges
meet, an annotation ``area`` field) and on a COCO-shaped synthetic set; the mAP figures agree to
1e-9 on box tables, on the fixture split and on the demo test split captured with the demo
detector; and the run records which engine scored it.
"""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import polars as pl
import pytest

from det_calib.evaluation.coco_engine import (
    _AREA_RANGES,
    _class_order,
    _coco_eval,
    _map_figures,
    _ranked,
)
from det_calib.evaluation.map_check import coco_maps
from det_calib.matching.one_to_one import group_keys

TOL = 1e-9


def coco_objects(arrays, n_img, cats, make_coco=None, g_area=None):
    """A COCO ground-truth object (pycocotools' ``COCO`` by default, or faster-coco-eval's) and its
    ``loadRes`` of the detections: ground truth ``k`` has id ``k + 1``, detection ``i`` id ``i + 1``."""
    if make_coco is None:
        from pycocotools.coco import COCO as make_coco
    d_img, d_xywh, d_score, d_cls, g_img, g_xywh, g_cls, g_crowd = arrays
    anns = [
        {
            "id": k + 1,
            "image_id": int(g_img[k]),
            "category_id": int(g_cls[k]),
            "bbox": [float(v) for v in g_xywh[k]],
            "area": float(g_xywh[k, 2] * g_xywh[k, 3] if g_area is None else g_area[k]),
            "iscrowd": int(g_crowd[k]),
        }
        for k in range(len(g_img))
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        coco = make_coco()
        coco.dataset = {
            "images": [{"id": i} for i in range(n_img)],
            "annotations": anns,
            "categories": [{"id": int(c)} for c in cats],
        }
        coco.createIndex()
        res = coco.loadRes(np.column_stack([d_img, d_xywh, d_score, d_cls]).astype(np.float64))
    return coco, res


def pycocotools_eval(*arrays, n_img, cats, max_dets, g_area=None):
    """COCOeval (bbox) evaluate + accumulate on the same arrays: its precision and recall."""
    from pycocotools.cocoeval import COCOeval

    coco, res = coco_objects(arrays, n_img, cats, g_area=g_area)
    with contextlib.redirect_stdout(io.StringIO()):
        ev = COCOeval(coco, res, "bbox")
        ev.params.maxDets = list(max_dets)
        ev.evaluate()
        ev.accumulate()
    return ev.eval["precision"], ev.eval["recall"]


def planted(seed: int, *, n_img: int = 30, n_cls: int = 4, grid: bool = True):
    """Detections near ground truth (some exact copies: IoU 1, ties), others anywhere; crowd
    ground truth; scores on a 0.1 grid (many ties); some images with no detections or no ground
    truth; box areas across COCO's small, medium and large ranges."""
    rng = np.random.default_rng(seed)
    g_img = np.repeat(np.arange(n_img), rng.integers(0, 6, n_img))
    g_cls = rng.integers(0, n_cls, len(g_img))
    g = np.column_stack(
        [rng.uniform(0, 300, (len(g_img), 2)), rng.uniform(5, 150, (len(g_img), 2))]
    )
    if grid:
        g = np.round(g)
    g_crowd = rng.uniform(size=len(g_img)) < 0.15
    nd = rng.integers(0, 25, n_img)
    nd[rng.integers(0, n_img, 3)] = 0
    d_img = np.repeat(np.arange(n_img), nd)
    d_cls = rng.integers(0, n_cls, len(d_img))
    d = np.column_stack(
        [rng.uniform(0, 300, (len(d_img), 2)), rng.uniform(5, 150, (len(d_img), 2))]
    )
    for i in range(len(d_img)):
        cand = np.flatnonzero(g_img == d_img[i])
        if len(cand) and rng.uniform() < 0.7:
            j = rng.choice(cand)
            d[i] = g[j] if rng.uniform() < 0.2 else g[j] + rng.normal(0, 6, 4)
            if rng.uniform() < 0.8:
                d_cls[i] = g_cls[j]
    d[:, 2:] = np.abs(d[:, 2:]) + 0.5
    if grid:
        d = np.round(d * 2) / 2
    score = np.round(rng.uniform(size=len(d_img)), 1)
    return (d_img, d, score, d_cls, g_img, g, g_cls, g_crowd), n_img, np.arange(n_cls)


# w x h pairs whose product is exactly a COCO area bound (32² or 96² px²), in floats as well
BOUNDARY_SHAPES = np.array(
    [[32.0, 32.0], [16.0, 64.0], [128.0, 8.0], [96.0, 96.0], [48.0, 192.0], [144.0, 64.0]]
)


def planted_on_boundaries(seed: int, *, n_img: int = 30):
    """A planted set where most ground truth and many detections have an area of exactly 32² or
    96² px²: COCO's area ranges are closed at both ends (such an object is small *and* medium, or
    medium *and* large), so a half-open range changes which objects count in each entry. Some
    detections copy a boundary object (IoU 1), others are false positives of a boundary area (an
    unmatched detection outside a range is ignored, inside it is a false positive)."""
    arrays, n_img, cats = planted(seed, n_img=n_img)
    d_img, d, score, d_cls, g_img, g, g_cls, g_crowd = arrays
    rng = np.random.default_rng(1000 + seed)
    on_g = rng.uniform(size=len(g)) < 0.7
    g[on_g, 2:] = BOUNDARY_SHAPES[rng.integers(0, len(BOUNDARY_SHAPES), on_g.sum())]
    g_crowd[on_g] = False
    for i in range(len(d_img)):
        cand = np.flatnonzero((g_img == d_img[i]) & on_g)
        u = rng.uniform()
        if len(cand) and u < 0.5:  # an exact copy of a boundary object, its class right or wrong
            j = rng.choice(cand)
            d[i] = g[j]
            d_cls[i] = g_cls[j] if rng.uniform() < 0.8 else d_cls[i]
        elif u < 0.8:  # a boundary-sized box somewhere (mostly a false positive)
            d[i, 2:] = BOUNDARY_SHAPES[rng.integers(0, len(BOUNDARY_SHAPES))]
    assert np.isin(g[:, 2] * g[:, 3], (32.0**2, 96.0**2)).mean() > 0.5
    assert np.isin(d[:, 2] * d[:, 3], (32.0**2, 96.0**2)).mean() > 0.5
    return (d_img, d, score, d_cls, g_img, g, g_cls, g_crowd), n_img, cats


def assert_parity(arrays, n_img, cats, max_dets, area_ranges=_AREA_RANGES):
    p_ref, r_ref = pycocotools_eval(*arrays, n_img=n_img, cats=cats, max_dets=max_dets)
    ours = _coco_eval(*arrays, categories=cats, max_dets=max_dets, area_ranges=area_ranges)
    assert ours.precision.shape == p_ref.shape and ours.recall.shape == r_ref.shape
    # bit for bit: the engine repeats pycocotools' float operations (a changed epsilon in the
    # precision's denominator moves it by one ulp)
    assert np.array_equal(ours.precision, p_ref) and np.array_equal(ours.recall, r_ref)
    return ours, p_ref


@pytest.mark.fast
@pytest.mark.parametrize("seed", range(12))
def test_planted_sets_equal_pycocotools(seed):
    arrays, n_img, cats = planted(seed, grid=seed % 2 == 0)
    max_dets = (1, 10, 100) if seed % 3 else (2, 5)
    ours, ref = assert_parity(arrays, n_img, cats, max_dets)
    # the planted sets exercise what they claim: crowd ground truth and score ties, every area
    # range holding boxes, undefined (-1) entries and maxDets cutting some group short
    assert arrays[7].any() and len(np.unique(arrays[2])) < len(arrays[2])
    assert (ref[..., -1] > -1).any(axis=(0, 1, 2)).all()
    assert not np.array_equal(ours.precision[..., 0], ours.precision[..., -1])


@pytest.mark.fast
@pytest.mark.parametrize("seed", range(6))
def test_matches_equal_pycocotools_dtmatches(seed):
    """Each detection's match (the ground truth it took at each IoU threshold, area range "all", the
    last maxDets) is pycocotools' ``evalImgs`` ``dtMatches``, crowd and ignored matches included."""
    from pycocotools.cocoeval import COCOeval

    arrays, n_img, cats = planted(seed, grid=seed % 2 == 0)
    max_dets = (1, 10, 100) if seed % 3 else (2, 5)
    coco, res = coco_objects(arrays, n_img, cats)
    with contextlib.redirect_stdout(io.StringIO()):
        ev = COCOeval(coco, res, "bbox")
        ev.params.maxDets = list(max_dets)
        ev.evaluate()
    ref = np.full((10, len(arrays[0])), -1)
    for e in ev.evalImgs:
        if e is not None and e["aRng"] == ev.params.areaRng[0]:
            ids = np.asarray(e["dtIds"], dtype=np.int64) - 1
            ref[:, ids] = np.asarray(e["dtMatches"], dtype=np.int64).reshape(10, -1) - 1
    ours = _coco_eval(*arrays, categories=cats, max_dets=max_dets, matches=True)
    assert ours.matches.shape == ref.shape
    assert np.array_equal(ours.matches, ref)
    # the matches exercise what they claim: crowd matches, unmatched detections, and fewer
    # matches at the strictest threshold than at 0.5
    assert arrays[7][ref[ref >= 0]].any() and (ref == -1).any()
    assert (ref[-1] >= 0).sum() < (ref[0] >= 0).sum()
    # without matches asked for, none is kept
    assert _coco_eval(*arrays, categories=cats, max_dets=max_dets).matches is None


@pytest.mark.fast
@pytest.mark.parametrize("seed", range(4))
def test_faster_coco_eval_agrees_with_the_engine(seed):
    """faster-coco-eval (the C++ COCOeval Ultralytics' val asks for): its precision and recall
    arrays equal the engine's to 1e-15 (pycocotools' exactly: the engine is bit for bit, the C++
    library rounds some entries differently, docs/generated/coco_engines.md) and the pairs it
    matched are the engine's."""
    from faster_coco_eval import COCO, COCOeval_faster

    arrays, n_img, cats = planted(seed, grid=seed % 2 == 0)
    coco, res = coco_objects(arrays, n_img, cats, COCO)
    ev = COCOeval_faster(coco, res, "bbox", print_function=lambda *a: None, extra_calc=True)
    ev.evaluate()
    ev.accumulate()
    ours = _coco_eval(*arrays, categories=cats, matches=True)
    assert np.allclose(ev.eval["precision"], ours.precision, rtol=0, atol=1e-15)
    assert np.allclose(ev.eval["recall"], ours.recall, rtol=0, atol=1e-15)
    # its "matched": every (detection, ground truth) pair matched at some IoU threshold in some area
    # range (the engine's matches are the first range's: one call per range)
    theirs = {tuple(int(x) - 1 for x in k.split("_")) for k in ev.eval["matched"]}
    per_range = [
        _coco_eval(*arrays, categories=cats, area_ranges=(r,), matches=True).matches
        for r in _AREA_RANGES
    ]
    engine = {(int(i), int(g)) for m in per_range for t in m for i, g in enumerate(t) if g >= 0}
    assert theirs == engine
    # pairs that hold at 0.5 only and pairs that hold from a stricter threshold on are both there
    at_50 = {(int(i), int(g)) for i, g in enumerate(ours.matches[0]) if g >= 0}
    assert len(at_50) > 10 and engine - at_50
    assert np.array_equal(per_range[0], ours.matches)


@pytest.mark.fast
@pytest.mark.parametrize("seed", range(4))
def test_area_range_boundaries_equal_pycocotools(seed):
    """Objects and detections of exactly 32² and 96² px²: pycocotools' closed ranges (an object of
    exactly 32² is both small and medium) in every entry of precision and recall."""
    arrays, n_img, cats = planted_on_boundaries(seed)
    ours, ref = assert_parity(arrays, n_img, cats, (1, 10, 100))
    # the small, medium and large entries all hold boundary objects (none is all -1)
    assert (ref[..., 1:, -1] > -1).any(axis=(0, 1, 2)).all()


@pytest.mark.fast
def test_area_bounds_are_closed():
    """Known answers: one object of exactly 32² px² found by one detection counts in the small
    and the medium range (AP 1 in each), not in the large one (-1); one of exactly 96² counts in
    medium and large. A lone false positive of exactly 32² beside a 20² object lowers the small
    and the medium AP (it lies inside both ranges), where a half-open range would ignore it."""
    for side, expect in ((32.0, [1.0, 1.0, 1.0, -1.0]), (96.0, [1.0, -1.0, 1.0, 1.0])):
        box = [[10.0, 10.0, side, side]]
        e = _coco_eval([0], box, [0.9], [0], [0], box, [0], categories=[0], max_dets=(100,))
        assert e.precision[0, 0, 0, :, 0] == pytest.approx(expect, abs=1e-12)
        assert e.recall[0, 0, :, 0] == pytest.approx(expect, abs=1e-12)
    g = [[200.0, 200.0, 20.0, 20.0], [10.0, 10.0, 32.0, 32.0]]
    d = [[300.0, 300.0, 16.0, 64.0], [200.0, 200.0, 20.0, 20.0], [10.0, 10.0, 32.0, 32.0]]
    e = _coco_eval(
        [0, 0, 0], d, [0.9, 0.8, 0.7], [0, 0, 0], [0, 0], g, [0, 0], categories=[0], max_dets=(100,)
    )
    # small: both objects found after the false positive -> precision 2/3 at every recall point;
    # medium: the 32² object found after the false positive -> 1/2
    for area, expect in ((1, 2 / 3), (2, 1 / 2)):
        assert _map_figures(e, area=area)["map50"] == pytest.approx(expect, abs=1e-12)
        assert pycocotools_map50(d, [0.9, 0.8, 0.7], g, area=area) == pytest.approx(
            expect, abs=1e-12
        )


def pycocotools_map50(d, score, g, *, area):
    d, g = np.asarray(d), np.asarray(g)
    p, _ = pycocotools_eval(
        np.zeros(len(d), int),
        d,
        np.asarray(score),
        np.zeros(len(d), int),
        np.zeros(len(g), int),
        g,
        np.zeros(len(g), int),
        np.zeros(len(g), bool),
        n_img=1,
        cats=[0],
        max_dets=(100,),
    )
    q = p[0, :, 0, area, 0]
    return float(q[q > -1].mean())


@pytest.mark.fast
def test_annotation_area_field_equals_pycocotools():
    """Ground truth whose ``area`` field is not ``w * h`` (COCO stores the segmentation's area): the
    area ranges read that field, as pycocotools does, so the small/medium/large entries follow it."""
    arrays, n_img, cats = planted(5)
    g_xywh = arrays[5]
    rng = np.random.default_rng(5)
    g_area = (
        g_xywh[:, 2] * g_xywh[:, 3] * rng.uniform(0.2, 1.0, len(g_xywh))
    )  # a mask fills part of its box
    g_area[::4] = 32.0**2  # some exactly on a bound
    p_ref, r_ref = pycocotools_eval(
        *arrays, n_img=n_img, cats=cats, max_dets=(1, 10, 100), g_area=g_area
    )
    ours = _coco_eval(*arrays, g_area, categories=cats, max_dets=(1, 10, 100))
    assert np.array_equal(ours.precision, p_ref) and np.array_equal(ours.recall, r_ref)
    by_box = _coco_eval(*arrays, categories=cats, max_dets=(1, 10, 100))
    assert not np.array_equal(
        by_box.precision[..., 1:, :], ours.precision[..., 1:, :]
    )  # the field matters


@pytest.mark.fast
def test_result_carries_its_parameters():
    arrays, n_img, cats = planted(1)
    e = _coco_eval(*arrays, categories=[3, 1, 2, 0, 1], max_dets=(2, 50))
    assert e.categories.tolist() == [0, 1, 2, 3] and e.max_dets == (2, 50)
    assert np.array_equal(e.iou_thresholds, np.linspace(0.5, 0.95, 10)) and e.precision.shape == (
        10,
        101,
        4,
        4,
        2,
    )


@pytest.mark.fast
def test_table_maps_equal_pycocotools_on_box_tables():
    """The engine's box-table entry (``table_maps``, the run's mAP check: ``coco_maps`` with
    ``engine="det_calib"``) against ``coco_maps`` with pycocotools, on box tables: an inverted
    box, crowd ground truth, several scorings, a ``max_dets`` that cuts; and
    a head with no boxes scores 0 on both."""
    arrays, n_img, cats = planted(4)
    d_img, d, score, d_cls, g_img, g, g_cls, g_crowd = arrays
    boxes = pl.DataFrame(
        {
            "image_id": d_img,
            "cls": d_cls,
            "x1": d[:, 0],
            "y1": d[:, 1],
            "x2": d[:, 0] + d[:, 2],
            "y2": d[:, 1] + d[:, 3],
        }
    )
    boxes = boxes.with_columns(
        pl.when(pl.int_range(pl.len()) % 9 == 0)
        .then(pl.col("x1") - 30)
        .otherwise(pl.col("x2"))
        .alias("x2")
    )  # some inverted: zero-area boxes
    gt = pl.DataFrame(
        {
            "image_id": g_img,
            "cls": g_cls,
            "x1": g[:, 0],
            "y1": g[:, 1],
            "x2": g[:, 0] + g[:, 2],
            "y2": g[:, 1] + g[:, 3],
            "crowd": g_crowd,
        }
    )
    sizes = np.full((n_img, 2), 400)
    rng = np.random.default_rng(4)
    scores = [score, rng.uniform(size=len(score)), np.round(score * 3) / 3]
    for max_dets in (300, 3):
        ours = coco_maps(boxes, gt, sizes, scores, max_dets=max_dets, engine="det_calib")
        ref = coco_maps(boxes, gt, sizes, scores, max_dets=max_dets, engine="pycocotools")
        for a, b in zip(ours, ref):
            assert a.keys() == b.keys() and all(abs(a[k] - b[k]) <= TOL for k in a), (a, b)
        assert ours[0] != ours[1] and 0 < ours[0]["map50"] < 1
    assert coco_maps(boxes.head(0), gt, sizes, [np.zeros(0)], engine="det_calib") == [
        {"map50_95": 0.0, "map50": 0.0, "map75": 0.0}
    ]


@pytest.mark.fast
def test_known_answers():
    """One object, two detections on it: the better-scored one first gives AP 1; a misplaced box
    scored above it halves the precision at full recall (AP 0.5 by COCO's 101-point rule); a
    crowd box absorbs a detection without a false positive; maxDets=1 drops the second box."""
    g = np.array([[10.0, 10.0, 20.0, 20.0]])
    hit, miss = [10.0, 10.0, 20.0, 20.0], [100.0, 100.0, 20.0, 20.0]
    one = dict(categories=[0], max_dets=(1, 100), area_ranges=_AREA_RANGES[:1])
    e = _coco_eval([0, 0], [hit, hit], [0.9, 0.8], [0, 0], [0], g, [0], **one)
    assert _map_figures(e) == pytest.approx(
        {"map50_95": 1.0, "map50": 1.0, "map75": 1.0}, abs=1e-12
    )
    e = _coco_eval([0, 0], [miss, hit], [0.9, 0.8], [0, 0], [0], g, [0], **one)
    assert _map_figures(e)["map50"] == pytest.approx(0.5, abs=1e-12)
    assert _map_figures(e, max_det=0)["map50"] == 0.0  # maxDets=1: only the misplaced box
    crowd = np.array([[10.0, 10.0, 20.0, 20.0], [90.0, 90.0, 50.0, 50.0]])
    e = _coco_eval(
        [0, 0], [hit, miss], [0.8, 0.9], [0, 0], [0, 0], crowd, [0, 0], [False, True], **one
    )
    # the box inside the crowd region is ignored, not wrong
    assert _map_figures(e)["map50"] == pytest.approx(1.0, abs=1e-12)
    none = _coco_eval(
        [0],
        [hit],
        [0.5],
        [1],
        [0],
        g,
        [0],
        categories=[0, 1],
        max_dets=(100,),
        area_ranges=_AREA_RANGES[:1],
    )
    assert none.precision[0, 0, :, 0, 0].tolist() == [0.0, -1.0]  # a class without ground truth: -1
    # no ground truth counts in an area range (no large object): its figures are -1, as COCO's summarize
    e = _coco_eval(
        [0, 0], [hit, hit], [0.9, 0.8], [0, 0], [0], g, [0], categories=[0], max_dets=(100,)
    )
    assert _map_figures(e, area=3) == {"map50_95": -1.0, "map50": -1.0, "map75": -1.0}
    assert _map_figures(e, area=1) == pytest.approx(
        {"map50_95": 1.0, "map50": 1.0, "map75": 1.0}, abs=1e-12
    )


def test_coco_shaped_set_equals_pycocotools(tmp_path):
    """Eighty classes, hundreds of boxes per image, both heads: the precision arrays agree."""
    from det_calib.capture.parts import read_parts
    from det_calib.data import load_data_yaml, load_split
    from det_calib.demo.coco_shaped import write_coco_shaped

    s = write_coco_shaped(tmp_path / "set", 40, seed=3)
    sp = load_split(load_data_yaml(s.data), "test")
    boxes = read_parts(s.parts / "test")
    g = sp.gt
    g_xywh = np.column_stack([g["x1"], g["y1"], g["x2"] - g["x1"], g["y2"] - g["y1"]])
    for head in ("nms", "e2e"):
        b = boxes.filter(pl.col("head") == head)
        d_xywh = np.column_stack([b["x1"], b["y1"], b["x2"] - b["x1"], b["y2"] - b["y1"]])
        arrays = (
            b["image_id"].to_numpy(),
            d_xywh,
            b["conf"].to_numpy(),
            b["cls"].to_numpy(),
            g["image_id"].to_numpy(),
            g_xywh,
            g["cls"].to_numpy(),
            g["crowd"].to_numpy(),
        )
        cats = np.unique(np.concatenate([arrays[3], arrays[6]]))
        assert_parity(arrays, len(sp.images), cats, (1, 10, 100))
        assert_parity(arrays, len(sp.images), cats, (300,), _AREA_RANGES)


def _both_engines(boxes, sp, scores):
    a = coco_maps(boxes, sp.gt, sp.sizes, scores, engine="pycocotools")
    b = coco_maps(boxes, sp.gt, sp.sizes, scores, engine="det_calib")
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys()
        for k in ra:
            assert abs(ra[k] - rb[k]) <= TOL, (k, ra[k], rb[k])
    return a


@pytest.fixture(scope="module")
def fixture_boxes(demo_model_path, fixture_yaml):
    from det_calib.capture import capture
    from det_calib.data import load_data_yaml, load_split

    sp = load_split(load_data_yaml(fixture_yaml), "fixture")
    return sp, capture(
        str(demo_model_path), sp.images, heads=("nms", "e2e"), imgsz=320, progress=False
    )


def test_fixture_split_equals_pycocotools(fixture_boxes):
    """The fixture split through the demo detector, both heads, raw and rescored (a temperature,
    a map that changes the ranking), with an inverted box and a crowd annotation planted."""
    sp, boxes = fixture_boxes
    gt = sp.gt.with_columns(pl.Series("crowd", np.arange(sp.gt.height) % 7 == 3))
    sp_crowd = type(sp)(
        name=sp.name, images=sp.images, sizes=sp.sizes, gt=gt, corrupt=[], root=sp.root
    )
    rng = np.random.default_rng(0)
    for head in ("nms", "e2e"):
        b = boxes.filter(pl.col("head") == head)
        b = b.with_columns(
            pl.when(pl.int_range(pl.len()) == 0)
            .then(pl.col("x1") + 50)
            .otherwise(pl.col("x2"))
            .alias("x2")
        )
        z = b["logit"].to_numpy()
        scores = [
            b["conf"].to_numpy(),
            1 / (1 + np.exp(-z / 1.3)),
            rng.permutation(b["conf"].to_numpy()),
        ]
        for split in (sp, sp_crowd):
            got = _both_engines(b, split, scores)
            assert got[0]["map50"] > 0.3 and got[2] != got[0]


@pytest.mark.slow
def test_demo_test_split_equals_pycocotools(demo_model_path):
    """The demo detector's boxes on the demo test split (both heads, the capture a run makes)."""
    from det_calib.capture import capture
    from det_calib.data import load_data_yaml, load_split
    from det_calib.demo import demo_data_yaml

    sp = load_split(load_data_yaml(demo_data_yaml()), "test")
    boxes = capture(str(demo_model_path), sp.images, heads=("nms", "e2e"), progress=False)
    for head in ("nms", "e2e"):
        b = boxes.filter(pl.col("head") == head)
        got = _both_engines(
            b, sp, [b["conf"].to_numpy(), 1 / (1 + np.exp(-b["logit"].to_numpy() / 0.9))]
        )
        assert got[0]["map50_95"] > 0.3


def test_run_records_the_engine_and_pycocotools_agrees(tmp_path, demo_model_path, fixture_yaml):
    """calibration.json names the engine; ``map_engine="pycocotools"`` gives the same figures."""
    from det_calib.pipeline import calibrate

    runs = {
        e: calibrate(
            demo_model_path,
            fixture_yaml,
            out=tmp_path / e,
            n_boot=20,
            progress=False,
            method="temperature",
            run_val=False,
            report=False,
            map_engine=e,
        )
        for e in ("det_calib", "pycocotools")
    }
    docs = {e: json.loads((r.out_dir / "calibration.json").read_text()) for e, r in runs.items()}
    for head in docs["det_calib"]["heads"]:
        ours, ref = docs["det_calib"]["eval"][head], docs["pycocotools"]["eval"][head]
        assert (ours["map_engine"], ref["map_engine"]) == ("det_calib", "pycocotools")
        for k in ("map50_95_before", "map50_95_after", "map50_before", "map50_after"):
            assert abs(ours[k] - ref[k]) <= TOL
        assert ours["map_identical"] and ref["map_identical"]
    assert "det_calib" in (runs["det_calib"].out_dir / "summary.txt").read_text()


@pytest.mark.parametrize(
    ("n", "n_img", "n_cls"), [(1, 1, 1), (500, 7, 3), (20000, 300, 80), (40000, 50, 10**6)]
)
def test_class_order_of_ranked_detections_is_the_four_key_sort(n, n_img, n_cls):
    """The detections in the engine's group order (image, class, rank): two stable sorts (score, then
    class) give the four-key ``lexsort`` (class, descending score, image, rank), with scores tied
    within and across images, and more classes than a 16-bit key holds."""
    rng = np.random.default_rng(n)
    d_img = rng.integers(0, n_img, n)
    d_cls = rng.integers(0, n_cls, n)
    d_score = np.round(rng.random(n), 2)  # many ties
    key_d, _ = group_keys(d_img, d_cls, d_img[:1], d_cls[:1])
    order, rank = _ranked(key_d, d_score, 10**9)
    cats = np.unique(d_cls)
    k_idx = np.searchsorted(cats, d_cls[order])
    acc, seg_start, seg_end = _class_order(k_idx, d_score[order], len(cats))
    want = np.lexsort((rank, d_img[order], -d_score[order], k_idx))
    assert np.array_equal(acc, want)
    assert np.array_equal(seg_end - seg_start, np.bincount(k_idx, minlength=len(cats)))
