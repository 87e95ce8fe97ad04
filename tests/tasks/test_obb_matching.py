"""Rotated one-to-one matching: parity with Ultralytics' OBBValidator (batch_probiou, match_predictions)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from det_calib.errors import InputError
from det_calib.tasks.obb.matching import _probiou, match_rotated, pair_probiou

pytestmark = pytest.mark.fast

THRESHOLDS = np.linspace(0.5, 0.95, 10)


@pytest.fixture(scope="module")
def validator():
    from ultralytics.models.yolo.obb import OBBValidator

    v = OBBValidator()
    assert np.allclose(v.iouv.numpy(), THRESHOLDS)
    return v


def _box(rng, kind: str) -> list[float]:
    cx, cy = rng.uniform(20, 300, 2)
    if kind == "square":  # near-square: w and h within 3%
        w = rng.uniform(10, 60)
        h = w * rng.uniform(0.97, 1.03)
    elif kind == "thin":
        h = rng.uniform(1.5, 5)
        w = h * rng.uniform(10, 40)
    else:
        w, h = rng.uniform(5, 80, 2)
    return [cx, cy, w, h, rng.uniform(-np.pi / 4, 3 * np.pi / 4)]


def _jitter(rng, b: list[float], kind: str) -> list[float]:
    cx, cy, w, h, t = b
    s = rng.choice([0.02, 0.08, 0.2])
    cx, cy = cx + rng.normal(0, s * w / 4), cy + rng.normal(0, s * h)
    w, h = w * (1 + rng.normal(0, s)), h * (1 + rng.normal(0, s))
    t = t + rng.normal(0, s)
    if kind == "square" and rng.random() < 0.5:  # the same box described with its sides swapped
        w, h, t = h, w, t + np.pi / 2
    if rng.random() < 0.3:  # the angle on the other side of the wrap-around (half a turn)
        t = t - np.pi if t > np.pi / 4 else t + np.pi
    return [cx, cy, abs(w), abs(h), t]


def make_case(seed: int) -> dict:
    """Images with rotated GTs of one kind per case (random, near-square, thin), detections that are
    jittered copies (some of the wrong class, several per GT, some across the angle wrap-around),
    random false ones; tied scores; detections of each image in descending score, as Ultralytics has them."""
    rng = np.random.default_rng(seed)
    kind = ("random", "square", "thin")[seed % 3]
    imgs = []
    for _ in range(int(rng.integers(1, 5))):
        g, gc, d, dc = [], [], [], []
        for _ in range(int(rng.integers(0, 7))):
            b, c = _box(rng, kind), int(rng.integers(0, 3))
            g.append(b), gc.append(c)
            for _ in range(int(rng.choice([0, 1, 1, 2, 3]))):
                (
                    d.append(_jitter(rng, b, kind)),
                    dc.append(c if rng.random() < 0.85 else int(rng.integers(3))),
                )
        for _ in range(int(rng.integers(0, 3))):
            d.append(_box(rng, kind)), dc.append(int(rng.integers(3)))
        s = rng.choice([0.2, 0.5, 0.5, 0.9], size=len(d)) if seed % 2 else rng.uniform(size=len(d))
        order = np.argsort(-s, kind="stable")
        imgs.append(
            (
                np.array(g).reshape(-1, 5),
                np.array(gc, int),
                np.array(d).reshape(-1, 5)[order],
                np.array(dc, int)[order],
                s[order],
            )
        )
    return {"images": imgs}


def _ultralytics_tp(validator, g, gc, d, dc, dtype) -> np.ndarray:
    preds = {"cls": torch.tensor(dc, dtype=dtype), "bboxes": torch.tensor(d, dtype=dtype)}
    batch = {"cls": torch.tensor(gc, dtype=dtype), "bboxes": torch.tensor(g, dtype=dtype)}
    return validator._process_batch(preds, batch)["tp"]


def _ours(case: dict, t: float):
    cols = [
        np.concatenate(x)
        for x in zip(
            *[
                (np.full(len(d), i), dc, s, d, np.full(len(g), i), gc, g)
                for i, (g, gc, d, dc, s) in enumerate(case["images"])
            ]
        )
    ]
    return match_rotated(*cols, iou_threshold=t), cols


@pytest.mark.parametrize("seed", range(36))
def test_parity_with_ultralytics_obb_validator(validator, seed):
    """At each of the validator's ten thresholds, our correct flags equal its tp matrix, image by
    image (ProbIoU in float64 on both sides)."""
    case = make_case(seed)
    for k, t in enumerate(THRESHOLDS):
        r, cols = _ours(case, float(t))
        at = 0
        for g, gc, d, dc, _ in case["images"]:
            tp = _ultralytics_tp(validator, g, gc, d, dc, torch.float64)
            np.testing.assert_array_equal(r.correct[at : at + len(d)], tp[:, k])
            at += len(d)
        assert not r.ignore.any()


def test_parity_in_float32_away_from_the_thresholds(validator):
    """The validator runs in float32: the flags agree wherever no pair's ProbIoU lies within 1e-5
    of a threshold."""
    agreed = 0
    for seed in range(36):
        case = make_case(seed)
        for g, gc, d, dc, s in case["images"]:
            if len(g) == 0 or len(d) == 0:
                continue
            near = np.abs(_probiou(d, g)[..., None] - THRESHOLDS).min() < 1e-5
            if near:
                continue
            tp = _ultralytics_tp(validator, g, gc, d, dc, torch.float32)
            for k, t in enumerate(THRESHOLDS):
                r = match_rotated(
                    np.zeros(len(d), int),
                    dc,
                    s,
                    d,
                    np.zeros(len(g), int),
                    gc,
                    g,
                    iou_threshold=float(t),
                )
                np.testing.assert_array_equal(r.correct, tp[:, k])
            agreed += 1
    assert agreed > 40


def test_probiou_equals_ultralytics_batch_probiou():
    from ultralytics.utils.metrics import batch_probiou

    rng = np.random.default_rng(0)
    for kind in ("random", "square", "thin"):
        a = np.array([_box(rng, kind) for _ in range(30)])
        b = np.array([_jitter(rng, x, kind) for x in a] + [_box(rng, kind) for _ in range(10)])
        np.testing.assert_allclose(_probiou(b, a), batch_probiou(b, a).numpy(), rtol=0, atol=1e-12)


def test_planted_geometry():
    """A near-square box turned by a right angle with its sides swapped, and a box across the
    +-pi/2 wrap-around, are the same box; a thin box turned by a few degrees is not."""
    same = 1 - np.sqrt(2e-7)
    sq = np.array([50, 50, 20, 19.8, 0.3])
    assert pair_probiou(sq, np.array([50, 50, 19.8, 20, 0.3 + np.pi / 2])) == pytest.approx(
        same, abs=1e-9
    )
    wrap_a, wrap_b = (
        np.array([80, 40, 30, 10, np.pi / 2 - 0.01]),
        np.array([80, 40, 30, 10, -np.pi / 2 - 0.01]),
    )
    assert pair_probiou(wrap_a, wrap_b) == pytest.approx(same, abs=1e-9)
    assert pair_probiou(wrap_a, np.array([80, 40, 30, 10, -np.pi / 2 + 0.01])) > 0.9
    thin = np.array([100, 100, 80, 2, 0.0])
    turned = pair_probiou(thin, thin + [0, 0, 0, 0, np.deg2rad(5)])
    assert turned < 0.5  # five degrees on an 80x2 box
    r = match_rotated(
        [0, 0], [0, 0], [0.9, 0.8], [thin + [0, 0, 0, 0, np.deg2rad(5)], thin], [0], [0], [thin]
    )
    assert r.correct.tolist() == [False, True]  # the better-scored but turned box is wrong


def test_overlap_ties_go_to_the_earlier_ground_truth(validator):
    """Two identical GTs: the first detection takes the first (Ultralytics' argmax), unlike COCO."""
    g = np.array([[50, 50, 20, 10, 0.2], [50, 50, 20, 10, 0.2]])
    d = np.array([[50, 50, 20, 10, 0.2], [50, 51, 20, 10, 0.2]])
    r = match_rotated([0, 0], [1, 1], [0.9, 0.8], d, [0, 0], [1, 1], g)
    assert r.gt_index.tolist() == [0, 1] and r.correct.all()
    assert _ultralytics_tp(validator, g, [1, 1], d, [1, 1], torch.float64)[:, 0].tolist() == [
        True,
        True,
    ]


def test_bad_input():
    with pytest.raises(
        InputError, match=r"`det_xywhr` to be of shape \(1, 5\), the length of `det_image`"
    ):
        match_rotated([0], [0], [0.5], [[1, 2, 3, 4]], [0], [0], [[1, 2, 3, 4, 0]])
    with pytest.raises(InputError, match="sizes w, h >= 0"):
        match_rotated([0], [0], [0.5], [[1, 2, -3, 4, 0]], [0], [0], [[1, 2, 3, 4, 0]])
    assert len(match_rotated([], [], [], np.zeros((0, 5)), [0], [0], [[1, 2, 3, 4, 0]])) == 0
    assert not match_rotated(
        [0], [0], [0.5], [[1, 2, 3, 4, 0]], [], [], np.zeros((0, 5))
    ).correct.any()


def test_parity_on_the_demo_rectangles(validator, tmp_path):
    """Jittered copies of the demo's rotated ground truth on 12 images: equal to the validator."""
    from det_calib.data.ground_truth import load_data_yaml
    from det_calib.demo.shapes import CLASS_NAMES
    from det_calib.tasks import load_task_split
    from det_calib.tasks.obb.demo_labels import write_obb_split
    from det_calib.tasks.obb.labels import split_xywhr

    write_obb_split(tmp_path, "test", 12)
    names = "\n".join(f"  {i}: {n}" for i, n in enumerate(CLASS_NAMES))
    (tmp_path / "data.yaml").write_text(f"path: {tmp_path}\ntest: images/test\nnames:\n{names}\n")
    sp = load_task_split(load_data_yaml(tmp_path / "data.yaml"), "test", task="obb")
    gx, gi, gc = split_xywhr(sp), sp.gt["image_id"].to_numpy(), sp.gt["cls"].to_numpy()
    rng = np.random.default_rng(1)
    n_correct = 0
    for i in range(12):
        g, c = gx[gi == i], gc[gi == i]
        src = np.array(
            [j for j in range(len(g)) for _ in range(int(rng.integers(0, 3)))], dtype=int
        )
        d = np.array([_jitter(rng, list(g[j]), "square") for j in src]).reshape(-1, 5)
        dc = c[src]
        s = np.sort(rng.uniform(size=len(d)))[::-1]
        if len(g) == 0 or len(d) == 0:
            continue
        tp = _ultralytics_tp(validator, g, c, d, dc, torch.float64)
        for k, t in enumerate(THRESHOLDS):
            r = match_rotated(
                np.zeros(len(d), int), dc, s, d, np.zeros(len(g), int), c, g, iou_threshold=float(t)
            )
            np.testing.assert_array_equal(r.correct, tp[:, k])
        n_correct += int(tp[:, 0].sum())
    assert n_correct > 10


def test_cases_are_not_vacuous():
    """The planted cases hold matches and misses of each kind, tied scores and GT-less images."""
    n_ok = n_bad = n_tie = 0
    for seed in range(36):
        r, cols = _ours(make_case(seed), 0.75)
        n_ok, n_bad = n_ok + int(r.correct.sum()), n_bad + int((~r.correct).sum())
        n_tie += len(cols[2]) - len(np.unique(cols[2]))
    assert n_ok >= 50 and n_bad >= 50 and n_tie >= 20
