"""The run's matching rule (``--match``): which overlap labels the boxes, chosen once, recorded, and applied."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from det_calib.data.box_table import CAPTURE_COLUMNS, SCHEMA
from det_calib.data.ground_truth import _GT_SCHEMA, Split
from det_calib.errors import InputError
from det_calib.tasks.match_rule import MATCH_CHOICES, MatchingRule, choose_matching, match_split
from det_calib.tasks.segment.mask_rebuild import _encode_masks

pytestmark = pytest.mark.fast

H, W = 30, 60


def _ring(x1, y1, x2, y2, width=1) -> np.ndarray:
    """A hollow rectangle: its box is (x1, y1, x2, y2), its area a thin outline."""
    m = np.zeros((H, W), np.uint8)
    m[y1:y2, x1:x2] = 1
    m[y1 + width : y2 - width, x1 + width : x2 - width] = 0
    return m


def _filled(x1, y1, x2, y2) -> np.ndarray:
    m = np.zeros((H, W), np.uint8)
    m[y1:y2, x1:x2] = 1
    return m


def _split(masks: list[np.ndarray | None], boxes: list[tuple], name: str = "calib") -> Split:
    gt = pl.DataFrame(
        {
            "image_id": [0] * len(boxes),
            "x1": [b[0] for b in boxes],
            "y1": [b[1] for b in boxes],
            "x2": [b[2] for b in boxes],
            "y2": [b[3] for b in boxes],
            "cls": [0] * len(boxes),
            "crowd": [False] * len(boxes),
        },
        schema=_GT_SCHEMA,
    )
    counts = [None if m is None else _encode_masks(m[None])[0] for m in masks]
    gt = gt.with_columns(pl.Series("segm", counts, dtype=pl.Binary))
    return Split(name=name, images=[], sizes=np.array([[W, H]]), gt=gt)


def _boxes(masks: list[np.ndarray], boxes: list[tuple], conf: list[float]) -> pl.DataFrame:
    n = len(boxes)
    cols = {
        "image": ["a.png"] * n,
        "image_id": [0] * n,
        "split": ["calib"] * n,
        "head": ["nms"] * n,
        "x1": [b[0] for b in boxes],
        "y1": [b[1] for b in boxes],
        "x2": [b[2] for b in boxes],
        "y2": [b[3] for b in boxes],
        "img_w": [W] * n,
        "img_h": [H] * n,
        "cls": [0] * n,
        "conf": conf,
        "logit": [float(np.log(c / (1 - c))) for c in conf],
    }
    df = pl.DataFrame(cols, schema={c: SCHEMA[c] for c in CAPTURE_COLUMNS})
    return df.with_columns(pl.Series("segm", _encode_masks(np.stack(masks)), dtype=pl.Binary))


def _case():
    """Two GTs and two detections that box IoU and mask IoU label oppositely.

    GT A: a 1-px hollow square, box (5, 5, 25, 25), 76 pixels; detection 1 fills that box (box IoU 1,
    mask IoU 76 / 400). GT B: a filled 10 x 10 square at (35, 5) and one stray pixel at (54, 24), box
    (35, 5, 55, 25); detection 2 is the square alone (box IoU 100 / 400, mask IoU 100 / 101).
    """
    b = _filled(35, 5, 45, 15)
    b[24, 54] = 1
    split = _split([_ring(5, 5, 25, 25), b], [(5, 5, 25, 25), (35, 5, 55, 25)])
    boxes = _boxes(
        [_filled(5, 5, 25, 25), _filled(35, 5, 45, 15)],
        [(5, 5, 25, 25), (35, 5, 45, 15)],
        [0.9, 0.8],
    )
    return split, boxes


def test_box_and_mask_iou_label_the_same_boxes_differently():
    split, boxes = _case()
    by_box = match_split(boxes, split, MatchingRule("box"), iou=0.5, loc_iou=0.1)
    by_mask = match_split(boxes, split, MatchingRule("mask"), iou=0.5, loc_iou=0.1)
    assert by_box["correct"].to_list() == [True, False]
    assert by_box["iou"].to_list() == pytest.approx([1.0, 0.25])
    assert by_mask["correct"].to_list() == [False, True]
    assert by_mask["iou"].to_list() == pytest.approx([76 / 400, 100 / 101])
    assert by_mask["loc_iou"].to_list() == pytest.approx([76 / 400, 100 / 101])  # both match at 0.1
    assert match_split(boxes, split, None, iou=0.5, loc_iou=0.1).equals(by_box)  # no rule: box IoU
    for col in ("correct", "iou", "ignore", "loc_iou"):  # the box table's types
        assert by_mask[col].dtype == SCHEMA[col]


def test_mask_matching_needs_the_boxes_masks():
    split, boxes = _case()
    with pytest.raises(InputError, match="no `segm` column"):
        match_split(boxes.drop("segm"), split, MatchingRule("mask"), iou=0.5, loc_iou=0.1)
    captured_on_box_labels = boxes.with_columns(pl.lit(None, dtype=pl.Binary).alias("segm"))
    with pytest.raises(InputError, match="2 boxes of split .* were captured without it"):
        match_split(captured_on_box_labels, split, MatchingRule("mask"), iou=0.5, loc_iou=0.1)
    assert (
        match_split(captured_on_box_labels, split, MatchingRule("box"), iou=0.5, loc_iou=0.1).height
        == 2
    )


def test_choose_matching():
    with_masks = _split([_ring(5, 5, 25, 25)], [(5, 5, 25, 25)])
    box_only = _split([None], [(5, 5, 25, 25)], name="test")
    assert choose_matching("auto", task="segment", splits=[with_masks, with_masks]).by == "mask"
    rule = choose_matching("auto", task="segment", splits=[with_masks, box_only])
    assert (rule.by, rule.reason) == ("box", "a segment model on box-only labels")
    assert (
        choose_matching("box", task="segment", splits=[with_masks]).words(0.5)
        == "box IoU >= 0.5 (chosen by --match box)"
    )
    assert choose_matching("mask", task="segment", splits=[with_masks]).by == "mask"
    assert choose_matching("auto", task="detect", splits=[with_masks]).by == "box"
    with pytest.raises(InputError, match=r"split `test` has 1 of 1 without one"):
        choose_matching("mask", task="segment", splits=[with_masks, box_only])
    with pytest.raises(InputError, match="needs a segment model"):
        choose_matching("mask", task="detect", splits=[with_masks])
    with pytest.raises(InputError, match="Expected `match`"):
        choose_matching("polygon", task="segment", splits=[])
    assert MATCH_CHOICES == ("auto", "box", "mask", "oks", "rotated")


def test_rule_round_trip():
    rule = MatchingRule("mask", "auto", "a segment model, every ground truth has a mask")
    assert MatchingRule.from_dict(rule.to_dict()) == rule
    assert MatchingRule.from_dict(None) is None
    with pytest.raises(InputError, match="one of"):
        MatchingRule.from_dict({"by": "polygon"})
    with pytest.raises(InputError, match="must be a string"):
        MatchingRule.from_dict({"by": 1})


# ------------------------------------------------------------------------------------ pose and OBB
def _pose_split(rng, n_img: int = 3, k: int = 5) -> Split:
    """Ground-truth poses (some keypoints unlabelled, one object with none) in ``n_img`` images."""
    rows = []
    for img in range(n_img):
        for _ in range(4):
            x1, y1 = rng.uniform(0, 150, 2)
            w, h = rng.uniform(10, 60, 2)
            kp = np.c_[
                rng.uniform(x1, x1 + w, k), rng.uniform(y1, y1 + h, k), rng.choice([0, 1, 2, 2], k)
            ]
            rows.append((img, x1, y1, x1 + w, y1 + h, int(rng.integers(2)), kp))
    rows[-1][6][:, 2] = 0  # no labelled keypoint: ignored, may absorb a detection
    gt = pl.DataFrame(
        {
            "image_id": [r[0] for r in rows],
            "x1": [r[1] for r in rows],
            "y1": [r[2] for r in rows],
            "x2": [r[3] for r in rows],
            "y2": [r[4] for r in rows],
            "cls": [r[5] for r in rows],
            "crowd": [False] * len(rows),
        },
        schema=_GT_SCHEMA,
    )
    kpts = np.stack([r[6].reshape(-1) for r in rows])
    gt = gt.with_columns(
        pl.Series("kpts", kpts, dtype=pl.Array(pl.Float64, 3 * k)),
        pl.Series("area", 0.53 * ((gt["x2"] - gt["x1"]) * (gt["y2"] - gt["y1"])).to_numpy()),
        pl.Series("num_keypoints", (kpts[:, 2::3] > 0).sum(1).astype(np.int32), dtype=pl.Int32),
    )
    return Split(name="calib", images=[], sizes=np.full((n_img, 2), 200), gt=gt)


def _capture_table(n: int, rng, payload: str, values) -> pl.DataFrame:
    img = rng.integers(0, 3, n)
    conf = rng.uniform(0.05, 0.95, n).round(2)  # ties in score
    x1, y1 = rng.uniform(0, 150, (2, n))
    cols = {
        "image": [f"{i}.png" for i in img],
        "image_id": img,
        "split": ["calib"] * n,
        "head": ["nms"] * n,
        "x1": x1,
        "y1": y1,
        "x2": x1 + 20,
        "y2": y1 + 20,
        "img_w": [200] * n,
        "img_h": [200] * n,
        "cls": rng.integers(0, 2, n),
        "conf": conf,
        "logit": np.log(conf / (1 - conf)),
    }
    df = pl.DataFrame(cols, schema={c: SCHEMA[c] for c in CAPTURE_COLUMNS})
    return df.with_columns(pl.Series(payload, values))


def test_match_split_by_oks_is_match_keypoints():
    """The run's table-level OKS labels are match_keypoints' (COCO `keypoints`, parity tested there) on the
    same arrays, at --iou and at --loc-iou; the rule's sigmas are the ones used."""
    from det_calib.tasks.pose.matching import match_keypoints

    rng = np.random.default_rng(0)
    sp = _pose_split(rng)
    g = sp.gt["kpts"].to_numpy().reshape(-1, 5, 3)
    # detections: noisy copies of the ground truth (keypoint conf as a third value), and random ones
    src = rng.integers(0, sp.gt.height, 30)
    det = g[src].copy()
    det[:, :, :2] += rng.normal(0, 3, (30, 5, 2))
    det[:, :, 2] = rng.uniform(0, 1, (30, 5))
    boxes = _capture_table(30, rng, "kpts", [d.tolist() for d in det.astype(np.float32)])
    boxes = boxes.with_columns(
        pl.Series("image_id", sp.gt["image_id"].to_numpy()[src]),
        pl.Series("cls", sp.gt["cls"].to_numpy()[src].astype(np.int32)),
    )
    for sigmas in (None, (0.1, 0.2, 0.3, 0.2, 0.1)):
        rule = MatchingRule("oks", "auto", "a pose model", sigmas=sigmas)
        got = match_split(boxes, sp, rule, iou=0.5, loc_iou=0.1)
        d32 = np.asarray(det, dtype=np.float32).astype(np.float64)
        args = (
            boxes["image_id"].to_numpy(),
            boxes["cls"].to_numpy(),
            boxes["conf"].to_numpy(),
            d32,
            sp.gt["image_id"].to_numpy(),
            sp.gt["cls"].to_numpy(),
            g,
            sp.gt["area"].to_numpy(),
            sp.gt.select("x1", "y1", "x2", "y2").to_numpy(),
            None,
            sp.gt["num_keypoints"].to_numpy(),
        )
        ref = match_keypoints(*args, oks_threshold=0.5, sigmas=sigmas)
        loc = match_keypoints(*args, oks_threshold=0.1, sigmas=sigmas)
        assert (
            got["correct"].to_list() == ref.correct.tolist()
            and got["ignore"].to_list() == ref.ignore.tolist()
        )
        assert np.array_equal(got["iou"].to_numpy(), ref.iou)
        assert np.array_equal(got["loc_iou"].to_numpy(), np.where(loc.correct, loc.iou, 0.0))
        assert 0 < got["correct"].sum() < 30
    for col in ("correct", "iou", "ignore", "loc_iou"):
        assert got[col].dtype == SCHEMA[col]


def test_match_split_by_rotated_iou_is_match_rotated():
    from det_calib.tasks.obb.matching import match_rotated

    rng = np.random.default_rng(1)
    m = 10
    g = np.c_[
        rng.uniform(20, 180, (m, 2)),
        rng.uniform(10, 40, (m, 2)),
        rng.uniform(-np.pi / 4, 3 * np.pi / 4, m),
    ]
    gt = pl.DataFrame(
        {
            "image_id": rng.integers(0, 3, m),
            "x1": g[:, 0] - 20,
            "y1": g[:, 1] - 20,
            "x2": g[:, 0] + 20,
            "y2": g[:, 1] + 20,
            "cls": rng.integers(0, 2, m),
            "crowd": [False] * m,
        },
        schema=_GT_SCHEMA,
    )
    sp = Split(
        name="calib",
        images=[],
        sizes=np.full((3, 2), 200),
        gt=gt.with_columns(pl.Series("xywhr", g, dtype=pl.Array(pl.Float64, 5))),
    )
    src = rng.integers(0, m, 25)
    det = (g[src] + rng.normal(0, [3, 3, 3, 3, 0.2], (25, 5))).astype(np.float32)
    det[:3, :2] = (
        1000.0  # far from everything: ProbIoU -5e-8 under Ultralytics' guard, 0 in the table
    )
    boxes = _capture_table(25, rng, "xywhr", [d.tolist() for d in det])
    boxes = boxes.with_columns(
        pl.Series("image_id", gt["image_id"].to_numpy()[src]),
        pl.Series("cls", gt["cls"].to_numpy()[src].astype(np.int32)),
    )
    got = match_split(
        boxes, sp, MatchingRule("rotated", "auto", "an OBB model"), iou=0.5, loc_iou=0.1
    )
    args = (
        boxes["image_id"].to_numpy(),
        boxes["cls"].to_numpy(),
        boxes["conf"].to_numpy(),
        det.astype(np.float64),
        gt["image_id"].to_numpy(),
        gt["cls"].to_numpy(),
        g,
    )
    ref = match_rotated(*args, iou_threshold=0.5)
    loc = match_rotated(*args, iou_threshold=0.1)
    assert got["correct"].to_list() == ref.correct.tolist() and 0 < got["correct"].sum() < 25
    assert (
        np.array_equal(got["iou"].to_numpy(), np.maximum(ref.iou, 0.0)) and got["iou"].min() == 0.0
    )
    assert (ref.iou < 0).any()  # the guard, really seen
    assert np.array_equal(got["loc_iou"].to_numpy(), np.where(loc.correct, loc.iou, 0.0))
    # --match box on the same boxes: the axis-aligned boxes' IoU, another labelling
    by_box = match_split(boxes, sp, MatchingRule("box", "box"), iou=0.5, loc_iou=0.1)
    assert by_box["correct"].to_list() != got["correct"].to_list()


def test_payload_matching_needs_the_payload():
    rng = np.random.default_rng(2)
    sp = _pose_split(rng)
    boxes = _capture_table(4, rng, "segm", [b"x"] * 4).drop("segm")
    with pytest.raises(InputError, match="matching by OKS needs each box's `kpts`"):
        match_split(boxes, sp, MatchingRule("oks"), iou=0.5, loc_iou=0.1)
    with pytest.raises(
        InputError, match=r"matching by rotated IoU \(ProbIoU\) needs each box's `xywhr`"
    ):
        match_split(boxes, sp, MatchingRule("rotated"), iou=0.5, loc_iou=0.1)


def test_choose_matching_for_pose_and_obb():
    rng = np.random.default_rng(3)
    pose = _pose_split(rng)
    rule = choose_matching("auto", task="pose", splits=[pose, pose])
    assert rule.by == "oks" and rule.sigmas == (0.2,) * 5
    assert (
        rule.words(0.5)
        == "OKS >= 0.5 (a pose model, 5 keypoints, sigmas 1/K = 0.2 each (Ultralytics' rule "
        "for other than 17 keypoints))"
    )
    own = choose_matching("oks", task="pose", splits=[pose], sigmas=(0.1, 0.2, 0.3, 0.2, 0.1))
    assert own.sigmas == (0.1, 0.2, 0.3, 0.2, 0.1) and "data.yaml's kpt_oks_sigmas" in own.reason
    assert (
        choose_matching("box", task="pose", splits=[pose]).words(0.5)
        == "box IoU >= 0.5 (a pose model, chosen by --match box)"
    )
    box_only = _split([None], [(5, 5, 25, 25)]).gt.drop("segm")
    plain = Split(name="test", images=[], sizes=np.array([[W, H]]), gt=box_only)
    with pytest.raises(InputError, match="split `test` was read without them: use --match box"):
        choose_matching("auto", task="pose", splits=[pose, plain])
    xywhr = pl.Series("xywhr", [[15.0, 15, 20, 20, 0]], dtype=pl.Array(pl.Float64, 5))
    rotated = Split(
        name="calib", images=[], sizes=np.array([[W, H]]), gt=box_only.with_columns(xywhr)
    )
    assert (
        choose_matching("auto", task="obb", splits=[rotated]).words(0.5)
        == "rotated IoU (ProbIoU) >= 0.5 (an OBB model)"
    )
    assert choose_matching("rotated", task="obb", splits=[rotated]).by == "rotated"
    assert (
        "axis-aligned boxes around the rotated ones"
        in choose_matching("box", task="obb", splits=[rotated]).reason
    )
    with pytest.raises(InputError, match="rotated IoU needs a rotated box"):
        choose_matching("auto", task="obb", splits=[plain])


@pytest.mark.parametrize(
    "option,task,needs",
    [
        ("oks", "detect", "a pose model"),
        ("oks", "obb", "a pose model"),
        ("oks", "segment", "a pose model"),
        ("rotated", "pose", "an OBB model"),
        ("rotated", "detect", "an OBB model"),
        ("mask", "pose", "a segment model"),
        ("mask", "obb", "a segment model"),
    ],
)
def test_a_rule_of_another_task_is_refused(option, task, needs):
    with pytest.raises(
        InputError,
        match=rf"^--match {option} needs {needs} .*; this model's task is `{task}`: use "
        r"--match box or auto$",
    ):
        choose_matching(option, task=task, splits=[])


def test_rule_with_sigmas_round_trip_and_old_records():
    rule = MatchingRule("oks", "auto", "a pose model, 5 keypoints", sigmas=(0.2,) * 5)
    d = rule.to_dict()
    assert d["sigmas"] == [0.2] * 5 and MatchingRule.from_dict(d) == rule
    # a record written before pose and OBB runs (no sigmas) reads as it was
    old = {
        "by": "mask",
        "option": "auto",
        "reason": "a segment model, every ground truth has a mask",
    }
    assert MatchingRule.from_dict(old).to_dict() == old
    assert MatchingRule.from_dict({"by": "rotated"}).words(0.5) == "rotated IoU (ProbIoU) >= 0.5"
    with pytest.raises(InputError, match="`matching.sigmas` must be a list of positive numbers"):
        MatchingRule.from_dict({"by": "oks", "sigmas": [0.1, -1]})
    with pytest.raises(InputError, match="OKS sigmas"):
        MatchingRule("box", sigmas=(0.1,))
