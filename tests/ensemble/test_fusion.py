"""Weighted boxes fusion: parity with ensemble-boxes, the score rules, invariants."""

from __future__ import annotations

import numpy as np
import pytest

from det_calib.ensemble.fusion import ENSEMBLE_BOXES_CONF_TYPE, SCORE_RULES, weighted_boxes_fusion
from det_calib.errors import InputError

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)

ensemble_boxes = pytest.importorskip("ensemble_boxes")


def _members(rng: np.random.Generator, n_obj: int, n_members: int, dup: float = 0.2):
    """Boxes of ``n_members`` noisy detectors around ``n_obj`` objects (some missed, some twice)."""
    xy = rng.uniform(0, 0.8, (n_obj, 2))
    wh = rng.uniform(0.03, 0.2, (n_obj, 2))
    base = np.concatenate([xy, xy + wh], 1)
    out = []
    for _ in range(n_members):
        take = rng.random(n_obj) < 0.8
        idx = np.concatenate([np.flatnonzero(take), np.flatnonzero(rng.random(n_obj) < dup)])
        b = base[idx] + rng.normal(0, 0.01, (len(idx), 4))
        b = np.clip(b, 0, 1)
        b[:, 2:] = np.maximum(b[:, 2:], b[:, :2] + 1e-3)
        b = np.clip(b, 0, 1)
        out.append((b, rng.random(len(idx)), rng.integers(0, 3, len(idx))))
    return out


def _flat(data):
    boxes = np.concatenate([d[0] for d in data]).reshape(-1, 4)
    scores = np.concatenate([d[1] for d in data])
    labels = np.concatenate([d[2] for d in data])
    members = np.concatenate([np.full(len(d[1]), i) for i, d in enumerate(data)])
    return boxes, scores, labels, members


def _sorted(boxes, scores, labels):
    o = np.lexsort((boxes[:, 1], boxes[:, 0], labels, -scores))
    return boxes[o], scores[o], labels[o]


@pytest.mark.parametrize("rule", list(ENSEMBLE_BOXES_CONF_TYPE))
@pytest.mark.parametrize("weighted", [False, True])
def test_parity_with_ensemble_boxes(rule, weighted):
    """Per image, the fused boxes, scores and labels equal ensemble-boxes' (to 1e-6), for every
    rule it has, with and without member weights, members that put two boxes into one fused box."""
    rng = np.random.default_rng(hash((rule, weighted)) % 2**32)
    compared = 0
    for trial in range(25):
        m = int(rng.integers(2, 5))
        data = _members(rng, int(rng.integers(1, 40)), m)
        w = rng.uniform(0.5, 2.0, m) if weighted else None
        iou = float(rng.choice([0.4, 0.55, 0.7]))
        rb, rs, rl = ensemble_boxes.weighted_boxes_fusion(
            [d[0] for d in data],
            [d[1] for d in data],
            [d[2] for d in data],
            weights=w,
            iou_thr=iou,
            conf_type=ENSEMBLE_BOXES_CONF_TYPE[rule],
        )
        boxes, scores, labels, members = _flat(data)
        f = weighted_boxes_fusion(
            boxes, scores, labels, groups=None, members=members, n_members=m, weights=w, iou_thr=iou
        )
        ob, os_, ol = _sorted(f.boxes, f.scores(rule), f.label)
        eb, es, el = _sorted(np.asarray(rb), np.asarray(rs), np.asarray(rl).astype(int))
        assert len(os_) == len(es), (trial, len(os_), len(es))
        np.testing.assert_allclose(os_, es, atol=1e-6, rtol=0)
        np.testing.assert_allclose(ob, eb, atol=1e-6, rtol=0)
        assert (ol == el).all()
        compared += len(es)
    assert compared > 200


def test_many_images_at_once_equal_one_image_at_a_time():
    """Fusing all images in one call (groups) gives each image's fusion exactly, and every input
    box points to a fused box of its own image and class."""
    rng = np.random.default_rng(3)
    per_image = [_members(rng, int(rng.integers(1, 30)), 3) for _ in range(12)]
    parts = [_flat(d) for d in per_image]
    boxes = np.concatenate([p[0] for p in parts])
    scores = np.concatenate([p[1] for p in parts])
    labels = np.concatenate([p[2] for p in parts])
    members = np.concatenate([p[3] for p in parts])
    groups = np.concatenate([np.full(len(p[1]), i) for i, p in enumerate(parts)])
    f = weighted_boxes_fusion(boxes, scores, labels, groups=groups, members=members, n_members=3)
    assert (f.cluster >= 0).all()
    assert (f.group[f.cluster] == groups).all() and (f.label[f.cluster] == labels).all()
    assert (np.bincount(f.cluster, minlength=len(f)) == f.stats["n"]).all()
    for i, (b, s, lab, mem) in enumerate(parts):
        one = weighted_boxes_fusion(b, s, lab, groups=None, members=mem, n_members=3)
        k = f.group == i
        for rule in SCORE_RULES:
            x = _sorted(f.boxes[k], f.scores(rule)[k], f.label[k])
            y = _sorted(one.boxes, one.scores(rule), one.label)
            for a, c in zip(x, y, strict=True):
                np.testing.assert_array_equal(a, c)


def test_score_rules_known_answers():
    """Two members agree on one object (scores 0.8 and 0.6), the third misses it; one lone box."""
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 11], [50, 50, 60, 60]], float)
    scores = np.array([0.8, 0.6, 0.3])
    f = weighted_boxes_fusion(
        boxes, scores, np.zeros(3, int), groups=None, members=np.array([0, 1, 2]), n_members=3
    )
    o = np.argsort(-f.stats["n"])
    got = {r: f.scores(r)[o] for r in SCORE_RULES}
    np.testing.assert_allclose(got["avg"], [1.4 / 3, 0.1])
    np.testing.assert_allclose(got["present"], [0.7, 0.3])
    np.testing.assert_allclose(got["max"], [0.8, 0.3])
    np.testing.assert_allclose(got["agree"], [0.7 * 2 / 3, 0.3 / 3])
    np.testing.assert_allclose(got["absent"], [1.4 / 3, 0.1])
    np.testing.assert_allclose(got["best-avg"], [1.4 / 3, 0.1])
    assert f.stats["members"][o].tolist() == [2, 1]
    # the fused box is the score-weighted mean of the two
    np.testing.assert_allclose(f.boxes[o][0], [0, 0, 10, (0.8 * 10 + 0.6 * 11) / 1.4])


def test_best_avg_counts_each_member_once_by_its_best_box():
    """A member's low-scored duplicate of an object drags every box-averaging rule down as far as
    a missing member would; ``best-avg`` takes each member's best box: (0.8 + 0.7 + 0.75) / 3."""
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 10.5], [0, 0, 10, 11], [0, 0, 10, 10.2]], float)
    f = weighted_boxes_fusion(
        boxes,
        np.array([0.8, 0.1, 0.7, 0.75]),
        np.zeros(4, int),
        groups=None,
        members=np.array([0, 0, 1, 2]),
        n_members=3,
    )
    assert len(f) == 1
    np.testing.assert_allclose(f.scores("best-avg"), [0.75])
    np.testing.assert_allclose(f.scores("agree"), [2.35 / 4])
    np.testing.assert_allclose(f.scores("avg"), [2.35 / 4])
    # weighted: sum over members of weight x best score, over the total weight (member 2 absent)
    g = weighted_boxes_fusion(
        boxes[:3],
        np.array([0.8, 0.1, 0.7]),
        np.zeros(3, int),
        groups=None,
        members=np.array([0, 0, 1]),
        n_members=3,
        weights=[2.0, 1.0, 1.0],
    )
    np.testing.assert_allclose(g.scores("best-avg"), [(2 * 0.8 + 0.7) / 4])


@pytest.mark.parametrize("weighted", [False, True])
def test_best_avg_equals_its_definition_on_random_members(weighted):
    """On random members over many images: each fused box's ``best-avg`` is the weighted mean over
    all members of the highest score among that member's boxes in it (0 for a member with none),
    computed box by box from ``cluster``."""
    rng = np.random.default_rng(11 + weighted)
    per_image = [_members(rng, int(rng.integers(1, 30)), 4, dup=0.5) for _ in range(10)]
    parts = [_flat(d) for d in per_image]
    boxes, scores, labels, members = (np.concatenate([p[k] for p in parts]) for k in range(4))
    groups = np.concatenate([np.full(len(p[1]), i) for i, p in enumerate(parts)])
    w = rng.uniform(0.5, 2.0, 4) if weighted else np.ones(4)
    f = weighted_boxes_fusion(
        boxes, scores, labels, groups=groups, members=members, n_members=4, weights=w, iou_thr=0.4
    )
    best = np.zeros((len(f), 4))
    for i in range(len(scores)):
        best[f.cluster[i], members[i]] = max(best[f.cluster[i], members[i]], scores[i])
    np.testing.assert_allclose(f.scores("best-avg"), best @ w / w.sum(), rtol=0, atol=1e-12)
    assert (f.stats["members"] == (best > 0).sum(1)).all()
    assert (
        np.bincount(f.cluster, minlength=len(f)) > f.stats["members"]
    ).any()  # duplicates occurred


def test_skip_threshold_and_bad_input():
    boxes = np.array([[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 2, 3]], float)  # the last has zero area
    f = weighted_boxes_fusion(
        boxes,
        np.array([0.5, 0.05, 0.9]),
        np.zeros(3, int),
        groups=None,
        members=np.array([0, 1, 0]),
        n_members=2,
        skip_box_thr=0.1,
    )
    assert len(f) == 1 and f.cluster.tolist() == [0, -1, -1]
    empty = weighted_boxes_fusion(
        np.zeros((0, 4)),
        np.zeros(0),
        np.zeros(0, int),
        groups=None,
        members=np.zeros(0, int),
        n_members=2,
    )
    assert len(empty) == 0 and empty.scores("avg").shape == (0,)
    with pytest.raises(InputError, match="member index"):
        weighted_boxes_fusion(
            boxes,
            np.ones(3),
            np.zeros(3, int),
            groups=None,
            members=np.array([0, 1, 2]),
            n_members=2,
        )
    with pytest.raises(InputError, match="weights"):
        weighted_boxes_fusion(
            boxes,
            np.ones(3),
            np.zeros(3, int),
            groups=None,
            members=np.zeros(3, int),
            n_members=2,
            weights=[1.0, 0.0],
        )
    with pytest.raises(InputError, match="fusion_score"):
        f.scores("mean")


def test_zero_width_or_height_boxes_are_skipped():
    """A box of zero width or zero height (wherever it sits) has zero area and never joins a fusion."""
    boxes = np.array([[0, 0, 4, 4], [3, 0, 3, 5], [0, 7, 5, 7], [0, 0, 4, 4.2]], float)
    f = weighted_boxes_fusion(
        boxes,
        np.full(4, 0.5),
        np.zeros(4, int),
        groups=None,
        members=np.array([0, 1, 0, 1]),
        n_members=2,
    )
    assert len(f) == 1 and f.cluster.tolist() == [0, -1, -1, 0]
    assert (
        f.group.dtype == f.label.dtype == np.int64 and f.boxes.dtype == np.float64
    )  # ids stay integers


def test_boxes_fuse_only_within_one_image_and_class_whatever_the_ids():
    """Identical boxes in two images under classes -1 and 0 (any integers, not only 0..n-1): one
    fused box per (image, class), none across."""
    box = [[0, 0, 10, 10]]
    boxes = np.array(box * 8, float)
    groups, labels = np.repeat([0, 1], 4), np.tile([-1, 0], 4)
    f = weighted_boxes_fusion(
        boxes, np.full(8, 0.5), labels, groups=groups, members=np.tile([0, 0, 1, 1], 2), n_members=2
    )
    assert len(f) == 4 and sorted(zip(f.label.tolist(), f.group.tolist())) == [
        (-1, 0),
        (-1, 1),
        (0, 0),
        (0, 1),
    ]


def test_empty_fusion_has_every_statistic():
    """No usable box: an empty fusion whose boxes are (0, 4) and whose every score rule gives an
    empty vector (each reads its own statistics)."""
    empty = weighted_boxes_fusion(
        np.zeros((0, 4)),
        np.zeros(0),
        np.zeros(0, int),
        groups=None,
        members=np.zeros(0, int),
        n_members=2,
    )
    assert empty.boxes.shape == (0, 4)
    for rule in SCORE_RULES:
        assert empty.scores(rule).shape == (0,)
    skipped = weighted_boxes_fusion(
        np.ones((2, 4)),
        np.full(2, 0.5),
        np.zeros(2, int),
        groups=None,
        members=np.zeros(2, int),
        n_members=2,
    )  # both of zero area
    assert skipped.boxes.shape == (0, 4) and skipped.cluster.tolist() == [-1, -1]
    assert all(skipped.scores(rule).shape == (0,) for rule in SCORE_RULES)
