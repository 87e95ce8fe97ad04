"""Weighted boxes fusion (WBF), vectorised across images and classes, with a choice of score rule.

The boxes of several detectors (the *members*) on one image are fused per class: boxes are taken
in descending order of score (times the member's weight); each joins the fused box it overlaps
most, if that IoU is above ``iou_thr``, or starts a new one; a fused box is the score-weighted
mean of the boxes it holds. This is the clustering of ``ensemble_boxes.weighted_boxes_fusion``
(Solovyev et al.), step for step, so that the boxes agree with it to float rounding
(``tests/ensemble/test_fusion.py``). The clustering does not depend on the score rule; the rules differ
only in the score a fused box gets from the boxes it holds:

=============  ====================================================================  ==========================
rule           fused score                                                           ensemble-boxes
=============  ====================================================================  ==========================
``avg``        the mean of every member's score, a member with no box counting 0     ``conf_type='avg'``
``present``    the (weighted) mean of the scores of the boxes it holds (absent ones  none
               do not count)
``max``        the highest score it holds                                            ``conf_type='max'``
``agree``      the mean of the boxes it holds times the share of the members'        ``'box_and_model_avg'``
               weight that agrees (has a box in it)
``absent``     the weighted sum of its scores over its boxes' weight plus the        ``'absent_model_aware_avg'``
               weight of the members that are absent
``best-avg``   each member's highest score among the boxes it holds, averaged over   none
               the members (weighted), an absent member counting 0: the deep
               ensemble's average of the members' probabilities
=============  ====================================================================  ==========================

With equal weights and at most one box per member in a fused box, ``avg``, ``agree``, ``absent``
and ``best-avg`` coincide; they differ when one member puts several boxes into one fused box. The
first three then average its boxes, so a member's low-scored duplicate of an object (the NMS head
keeps same-class boxes that overlap by less than its IoU; the one-to-one head ranks several boxes
per object) drags the fused score down as much as another member's disagreement would;
``best-avg`` counts each member once, by its best box.

Vectorisation: the groups (image, class) are processed together, one box rank at a time. The
groups are sorted by size, so the groups that still have a box at rank ``k`` are a prefix; each
step computes the IoU of every active group's ``k``-th box with that group's fused boxes at
once. The Python loop runs over box ranks (at most the largest group), not over boxes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from det_calib.errors import InputError
from det_calib.validation import check_choice

_ScoreRule = Literal["avg", "present", "max", "agree", "absent", "best-avg"]
SCORE_RULES: tuple[str, ...] = get_args(_ScoreRule)
ENSEMBLE_BOXES_CONF_TYPE: dict[str, str] = {
    "avg": "avg",
    "max": "max",
    "agree": "box_and_model_avg",
    "absent": "absent_model_aware_avg",
}
"""Score rule -> ``conf_type`` of ``ensemble_boxes.weighted_boxes_fusion`` that computes the same
score (``present`` has none)."""

_CELLS = 2_000_000
"""Groups x cluster slots of one chunk (bounds the padded arrays: ~100 MB at most)."""


@dataclass(frozen=True)
class Fused:
    """Fused boxes and, for every input box, the fused box it joined.

    Attributes:
        group: Group id of each fused box (the ``groups`` value of its boxes).
        label: Class of each fused box.
        boxes: ``(n, 4)`` fused corners, float64.
        stats: Per fused box: ``n`` boxes held, ``wsum`` their weights, ``ssum`` the sum of their
            weighted scores, ``smax`` the highest weighted score, ``members`` distinct members
            present, ``mweight`` those members' weight, ``bsum`` the sum over those members of
            each one's highest weighted score.
        cluster: For each input box, the index of its fused box (-1 for a box skipped: score below
            ``skip_box_thr`` or zero area).
        weights: Member weights used.
    """

    group: np.ndarray
    label: np.ndarray
    boxes: np.ndarray
    stats: dict[str, np.ndarray]
    cluster: np.ndarray
    weights: np.ndarray

    def __len__(self) -> int:
        return int(len(self.label))

    def scores(self, rule: _ScoreRule, *, allows_overflow: bool = False) -> np.ndarray:
        """The fused score of every fused box under ``rule`` (see the module's table)."""
        check_choice(rule, SCORE_RULES, "fusion_score")
        st, w = self.stats, self.weights
        wtot = float(w.sum())
        n = st["n"].astype(np.float64)
        mean = st["ssum"] / np.maximum(n, 1)
        if rule == "avg":
            return mean * (n if allows_overflow else np.minimum(len(w), n)) / wtot
        if rule == "present":
            return st["ssum"] / st["wsum"]
        if rule == "max":
            return st["smax"] / float(w.max())
        if rule == "agree":
            return mean * n / st["wsum"] * st["mweight"] / wtot
        if rule == "best-avg":
            return st["bsum"] / wtot
        return mean * n / (st["wsum"] + (wtot - st["mweight"]))  # absent


def _check(
    boxes: np.ndarray,
    scores: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    members: np.ndarray,
    n_members: int,
    weights: np.ndarray | None,
    iou_thr: float,
) -> np.ndarray:
    n = len(scores)
    if boxes.shape != (n, 4) or not (len(labels) == len(groups) == len(members) == n):
        raise InputError(
            f"Expected `boxes` of shape (n, 4) and n labels, groups and members, but got boxes "
            f"{boxes.shape}, {len(scores)} scores, {len(labels)} labels, {len(groups)} groups, "
            f"{len(members)} members"
        )
    if not 0 <= iou_thr < 1:
        raise InputError(f"Expected `iou_thr` in [0, 1), but got {iou_thr}")
    if n_members < 1 or (n and (members.min() < 0 or members.max() >= n_members)):
        raise InputError(
            f"Expected every member index in [0, {n_members}), but got {members.min() if n else ''}"
            f"..{members.max() if n else ''}"
        )
    w = np.ones(n_members) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (n_members,) or not (w > 0).all():
        raise InputError(f"Expected {n_members} positive member `weights`, but got {w.tolist()}")
    return w


def weighted_boxes_fusion(
    boxes: np.ndarray,
    scores: np.ndarray,
    labels: np.ndarray,
    *,
    groups: np.ndarray | None,
    members: np.ndarray,
    n_members: int,
    weights: np.ndarray | None = None,
    iou_thr: float = 0.55,
    skip_box_thr: float = 0.0,
) -> Fused:
    """Cluster the boxes of ``n_members`` members per (group, label) as weighted boxes fusion does.

    Args:
        boxes: ``(n, 4)`` corners ``x1, y1, x2, y2`` (any unit: IoU and means do not depend on it).
        scores: Score of each box in [0, 1].
        labels: Class of each box.
        groups: Image of each box (boxes of different groups never fuse); None: one image.
        members: Member index of each box, in ``[0, n_members)``.
        n_members: Number of members (absent members count in ``avg``, ``agree``, ``absent``).
        weights: Member weights (default 1 each).
        iou_thr: A box joins a fused box when their IoU is above this.
        skip_box_thr: Boxes with a lower score are left out.

    Returns:
        A :class:`Fused`; :meth:`Fused.scores` gives the score of each fused box under a rule.
    """
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    members = np.asarray(members, dtype=np.int64)
    groups = (
        np.zeros(len(scores), np.int64) if groups is None else np.asarray(groups, dtype=np.int64)
    )
    w = _check(boxes, scores, labels, groups, members, n_members, weights, iou_thr)
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    usable = np.flatnonzero((scores >= skip_box_thr) & (area != 0))
    cluster = np.full(len(scores), -1, np.int64)
    if not len(usable):
        return _empty(cluster, w)
    ws = scores[usable] * w[members[usable]]
    # group of (image, class); within it, boxes by descending weighted score (ties: later box first,
    # as the reversed argsort of ensemble-boxes for small groups)
    key = _group_key(groups[usable], labels[usable])
    order = np.lexsort((-np.arange(len(usable)), -ws, key))
    src = usable[order]
    gid = key[order]
    sizes = np.bincount(gid)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    by_size = np.argsort(-sizes, kind="stable")
    out = []
    lo = 0
    while lo < len(by_size):
        width = int(sizes[by_size[lo]])
        hi = min(len(by_size), lo + max(1, _CELLS // max(width, 1)))
        chunk = by_size[lo:hi]
        out.append(
            _fuse_chunk(
                chunk,
                sizes[chunk],
                starts[chunk],
                src,
                boxes,
                ws[order],
                w[members],
                cluster,
                iou_thr,
            )
        )
        lo = hi
    return _collect(out, cluster, groups, labels, members, w, ws, usable)


def _group_key(groups: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Dense ids of the (group, label) pairs, in the order of (group, label)."""
    lo = labels.min()
    combined = (groups - groups.min()) * (int(labels.max() - lo) + 1) + (labels - lo)
    return np.unique(combined, return_inverse=True)[1].ravel()


def _empty(cluster: np.ndarray, w: np.ndarray) -> Fused:
    z = np.zeros(0)
    stats = dict.fromkeys(("n", "wsum", "ssum", "smax", "members", "mweight", "bsum"), z)
    return Fused(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 4)), stats, cluster, w)


def _join(
    corners: list[np.ndarray], area: np.ndarray, n_cl: np.ndarray, b: np.ndarray, iou_thr: float
) -> tuple[np.ndarray, np.ndarray]:
    """The slot each of the ``len(b)`` active groups' next box ``b`` goes to: the group's fused box
    it overlaps most if that IoU is above ``iou_thr`` (``hit``), else the group's next free slot
    (``n_cl``)."""
    a, c = len(b), int(n_cl.max())
    if not c:
        return n_cl.copy(), np.zeros(a, bool)
    x1, y1, x2, y2 = (v[:a, :c] for v in corners)
    iw = np.minimum(x2, b[:, 2:3])
    iw -= np.maximum(x1, b[:, 0:1])
    ih = np.minimum(y2, b[:, 3:4])
    ih -= np.maximum(y1, b[:, 1:2])
    np.maximum(iw, 0, out=iw)
    np.maximum(ih, 0, out=ih)
    iw *= ih  # intersection
    union = area[:a, :c] + ((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]))[:, None]
    union -= iw
    iw /= union  # IoU
    best = np.argmax(iw, axis=1)
    hit = iw[np.arange(a), best] > iou_thr
    return np.where(hit, best, n_cl), hit


def _fuse_chunk(
    chunk: np.ndarray,
    sizes: np.ndarray,
    starts: np.ndarray,
    src: np.ndarray,
    boxes: np.ndarray,
    ws: np.ndarray,
    box_w: np.ndarray,
    cluster: np.ndarray,
    iou_thr: float,
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Cluster the groups of one chunk (sorted by size, largest first); fills ``cluster`` with each
    box's slot within its group and returns the chunk's fused boxes.

    The fused corners are kept as four contiguous (groups x slots) arrays; an unused slot has
    corners at -inf and area 0, so its IoU with any box is 0 and it never matches (a box joins a
    fused box only above ``iou_thr`` >= 0): no mask is needed."""
    g, width = len(chunk), int(sizes[0])
    corners = [np.full((g, width), -np.inf) for _ in range(4)]
    area = np.zeros((g, width))
    acc = np.zeros((g, width, 4))
    ssum = np.zeros((g, width))
    smax = np.zeros((g, width))
    wsum = np.zeros((g, width))
    count = np.zeros((g, width), np.int64)
    n_cl = np.zeros(g, np.int64)
    active = np.searchsorted(
        -sizes, -np.arange(width), side="left"
    )  # groups with more than k boxes
    for k in range(width):
        a = int(active[k])
        rows = np.arange(a)
        pos = starts[:a] + k
        b_idx = src[pos]
        b = boxes[b_idx]
        sc = ws[pos]
        slot, hit = _join(corners, area, n_cl[:a], b, iou_thr)
        n_cl[:a] += ~hit
        acc[rows, slot] += sc[:, None] * b
        ssum[rows, slot] += sc
        wsum[rows, slot] += box_w[b_idx]
        smax[rows, slot] = np.maximum(smax[rows, slot], sc)
        count[rows, slot] += 1
        one = count[rows, slot] == 1
        new = np.where(one[:, None], b, acc[rows, slot] / ssum[rows, slot][:, None])
        for j in range(4):
            corners[j][rows, slot] = new[:, j]
        area[rows, slot] = (new[:, 2] - new[:, 0]) * (new[:, 3] - new[:, 1])
        cluster[b_idx] = slot
    keep = np.arange(width)[None, :] < n_cl[:, None]
    gi, si = np.nonzero(keep)
    fused = np.stack([v[gi, si] for v in corners], 1)
    return (
        chunk[gi],
        si,
        {"n": count[gi, si], "wsum": wsum[gi, si], "ssum": ssum[gi, si], "smax": smax[gi, si]},
        fused,
    )


def _collect(
    parts: list,
    cluster: np.ndarray,
    groups: np.ndarray,
    labels: np.ndarray,
    members: np.ndarray,
    w: np.ndarray,
    ws: np.ndarray,
    usable: np.ndarray,
) -> Fused:
    """Number the fused boxes (group after group, slot order), turn slots into fused-box indices
    and add the distinct members of each fused box and each one's best weighted score (``ws``:
    the weighted scores of the ``usable`` boxes)."""
    gid = np.concatenate([p[0] for p in parts])
    slot = np.concatenate([p[1] for p in parts])
    stats = {k: np.concatenate([p[2][k] for p in parts]) for k in parts[0][2]}
    fb = np.concatenate([p[3] for p in parts])
    order = np.lexsort((slot, gid))
    gid, slot, fb = gid[order], slot[order], fb[order]
    stats = {k: v[order] for k, v in stats.items()}
    # input boxes: group id again (same key as in the fusion) to map (group, slot) -> fused index
    used = cluster >= 0
    key_all = np.full(len(cluster), -1, np.int64)
    key_all[used] = _group_key(groups[used], labels[used])
    first_of_group = np.searchsorted(gid, np.arange(int(gid.max()) + 1))
    idx = np.full(len(cluster), -1, np.int64)
    idx[used] = first_of_group[key_all[used]] + cluster[used]
    # representative group/label of each fused box: from any of its boxes
    rep = np.zeros(len(gid), np.int64)
    rep[idx[used]] = np.flatnonzero(used)
    # (fused box, member) pairs, each with the member's best weighted score in that fused box
    fused_all = idx[usable]
    pair = fused_all * len(w) + members[usable]
    first = np.lexsort((-ws, pair))
    first = first[np.r_[True, pair[first][1:] != pair[first][:-1]]]
    fused_of, member_of = fused_all[first], members[usable][first]
    n_mem = np.bincount(fused_of, minlength=len(gid))
    mweight = np.bincount(fused_of, weights=w[member_of], minlength=len(gid))
    bsum = np.bincount(fused_of, weights=ws[first], minlength=len(gid))
    stats = {**stats, "members": n_mem, "mweight": mweight, "bsum": bsum}
    return Fused(groups[rep], labels[rep], fb, stats, idx, w)
