"""The heads that ride on the stock pass of :func:`det_calib.evaluation.map_check.ultralytics_val_heads`:
which they are (:func:`rider_specs`), and the layers the original's heads read instead of computing them
(:func:`share_with_originals`): those they have identically with the calibrated head of the same mode,
run before them on the same features (:mod:`det_calib.deploy.fold` changes only the class branch's last
conv, or appends layers after it).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from det_calib.data.box_table import HEAD_PREDICT_NMS


def rider_specs(
    orig: Any, calibrated: Any, heads: list[str], confs: Mapping[str, tuple[float, float]]
) -> list[tuple]:
    """What rides on the stock pass of :func:`ultralytics_val_heads`, ``(side, head, model, end2end, conf)``
    each: the original in the first head's mode, and for each further head (the one-to-one branch of a
    YOLO26 model beside its one-to-many branch: the two are decoded from the same features, as the capture
    does) the calibrated and the original checkpoint's head; each on a copy of its own made before val fuses
    anything (the original's last one on ``orig`` itself, which the caller loaded for this pass alone),
    prepared as val prepares a model for that mode (fused, ``end2end`` as ``nms=False`` sets it)."""
    import copy

    sources = [("original", heads[0], orig)] + [
        (side, h, calibrated if side == "calibrated" else orig)
        for h in heads[1:]
        for side in ("calibrated", "original")
    ]
    # the original was loaded for this pass alone: its last rider takes it as it is, the others a copy
    last = max(i for i, (side, _, _) in enumerate(sources) if side == "original")
    return [
        (
            side,
            h,
            src if i == last else copy.deepcopy(src),
            HEAD_PREDICT_NMS[h] is False,
            confs[h][side == "calibrated"],
        )
        for i, (side, h, src) in enumerate(sources)
    ]


def share_with_originals(stock: Any, riders: list[tuple[str, str, Any]]) -> int:
    """Make each original head of ``riders`` (``(side, head mode, fused Detect head)``, in the order they
    run) read the layers it shares with the calibrated head of its mode (:func:`_share_unchanged_layers`):
    ``stock``, the stock pass's head, for the first rider's mode (the first rider is the original in that
    mode), the calibrated rider of the mode for the others. Returns how many layers are read."""
    calibrated = {h: d for side, h, d in riders if side == "calibrated"}
    if riders:
        calibrated[riders[0][1]] = stock
    return sum(
        _share_unchanged_layers(calibrated[h], d)
        for side, h, d in riders
        if side == "original" and h in calibrated
    )


def _same_layer(a: Any, b: Any) -> bool:
    """Whether two fused layers compute the same thing: the same type and settings (their ``repr``) and
    equal parameters and buffers, dtype, shape and memory layout included."""
    if type(a) is not type(b) or repr(a) != repr(b):
        return False
    sa, sb = a.state_dict(), b.state_dict()
    import torch

    return sa.keys() == sb.keys() and all(
        sa[k].dtype == sb[k].dtype
        and sa[k].stride() == sb[k].stride()
        and torch.equal(sa[k], sb[k])
        for k in sa
    )


def _share_unchanged_layers(source: Any, rider: Any) -> int:
    """Make ``rider`` (a fused Detect head) read, instead of computing them, the outputs of the layers of
    its branch that ``source`` (a fused Detect head in the same mode, run first on the same features)
    has identically.

    A calibrated checkpoint differs from its original only in the class branch's last conv (an affine
    map) or in layers appended after it (a piecewise-linear map), :mod:`det_calib.deploy.fold`. So the
    original's box branch is the calibrated one's, and its class branch shares the calibrated one's
    leading layers: the same layers with the same weights on the same input tensor give the same
    tensor, bit for bit. Each rider level whose box branch equals the source's reads the source's box
    output of the batch; each class branch reads the output of the longest common run of leading
    layers and computes only the rest. A forward hook on the source keeps those outputs (one batch's).

    Returns:
        How many layers of ``rider`` now read ``source``'s outputs (0: the two share nothing).
    """
    import torch

    def branch(d: Any) -> tuple[Any, Any]:
        b = d.one2one if d.end2end else d.one2many
        return b["box_head"], b["cls_head"]

    if bool(source.end2end) != bool(rider.end2end):
        return 0
    replay = _replay_class()
    (src_box, src_cls), (box, cls) = branch(source), branch(rider)
    if src_box is None or box is None or len(src_box) != len(box) or len(src_cls) != len(cls):
        return 0
    shared = 0
    for i in range(len(box)):
        if _same_layer(src_box[i], box[i]):
            box[i] = replay(src_box[i], src_box[i])
            shared += 1
        a, b = src_cls[i], cls[i]
        if isinstance(a, torch.nn.Sequential) and isinstance(b, torch.nn.Sequential):
            k = 0
            while k < min(len(a), len(b)) and _same_layer(a[k], b[k]):
                k += 1
            if k:
                cls[i] = torch.nn.Sequential(replay(a[k - 1], a), *list(b)[k:])
                shared += k
    return shared


@functools.cache
def _replay_class():
    import torch

    class Replay(torch.nn.Module):
        """Stands in for the leading layers of a branch level: returns what the source's ``watched`` layer
        returned last, provided the source's ``level`` (the branch level that layer leads or is) ran on the
        very tensor this one is given; hooks on the source keep both (one batch's)."""

        def __init__(self, watched: Any, level: Any) -> None:
            super().__init__()
            self.kept: list = [None, None]  # the level's input, the watched layer's output
            kept = self.kept
            level.register_forward_pre_hook(lambda module, args: kept.__setitem__(0, args[0]))
            watched.register_forward_hook(lambda module, args, output: kept.__setitem__(1, output))

        def forward(self, x: Any) -> Any:
            (given, out), self.kept[:] = self.kept, [None, None]
            if out is None or given is not x:
                raise RuntimeError(
                    "a shared head layer was read on another input than the head it shares"
                )
            return out

    return Replay
