# Long file: both mAP checks (pycocotools, and Ultralytics' val in one shared pass or one stock val per
# checkpoint for a model family) with the validator subclasses they need.
"""Check that calibration leaves mAP unchanged.

Two independent checks:

- :func:`coco_map`: pycocotools COCOeval on the captured boxes of a split, scored with the raw
  and with the calibrated confidences. A shared monotone temperature keeps every ranking, so the
  two results must be identical.
- :func:`ultralytics_val`: Ultralytics' own ``model.val()`` on a checkpoint: the original at val's
  floor ``conf=0.001``, and the calibrated one at the equivalent floor ``sigmoid(logit(0.001) / T)``,
  where the candidate set is the original one and mAP must match. (At val's own floor a
  temperature below 1 pushes some boxes under it, above 1 lifts extra ones over it, so mAP can
  move slightly; the pipeline no longer runs that third val.)
- :func:`_ultralytics_val_shared`: both of those from one val pass, as the pipeline runs them: the
  stock val of the calibrated checkpoint, and on the same neck features the original checkpoint's
  Detect head, scored by the same validator's postprocess and metric code (the calibrated
  checkpoint differs from the original only inside the head, :mod:`det_calib.deploy.fold`). Its figures
  equal those of the two separate vals (tests/evaluation/test_map_check.py).
- :func:`ultralytics_val_heads`: the same for every head of a two-head (YOLO26) checkpoint in one
  pass: the other branch of the calibrated checkpoint, and the original's branches, decoded from the
  features of the stock one, each through the validator's postprocess in its own mode (what the
  pipeline runs).

Every det_calib val runs Ultralytics' NMS with no wall-clock budget (its own stops after
``2.0 + 0.05 * batch`` seconds and returns no boxes for the batch's remaining images, which on a
slow or busy CPU lowers mAP by the clock): the stock validator with only that argument changed.
A pass in which the NMS time limit was still reached (a finite ``nms_time_limit``) raises
:class:`ValIncomplete`: its mAP is never returned.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from det_calib.capture.family_registry import family_of
from det_calib.capture.predictor import default_imgsz, nms_max_time_img
from det_calib.data.box_table import HEAD_PREDICT_NMS
from det_calib.errors import InputError
from det_calib.evaluation.coco_engine import table_maps
from det_calib.evaluation.val_riders import rider_specs, share_with_originals
from det_calib.matching.one_to_one import collapse_inverted
from det_calib.tasks import TASKS, get_task, task_names

_log = logging.getLogger(__name__)

MAP_ENGINES = ("det_calib", "pycocotools")
"""What can score :func:`coco_maps`: :mod:`det_calib.evaluation.coco_engine` (the run's default, ``map_engine``) or
pycocotools itself (this module's default)."""


def coco_map(
    boxes: pl.DataFrame,
    gt: pl.DataFrame,
    sizes: np.ndarray,
    scores: np.ndarray | None = None,
    *,
    max_dets: int = 300,
) -> dict[str, float]:
    """COCO bbox mAP of one head's boxes on one split, with pycocotools.

    Args:
        boxes: Box table of one head and one split (``image_id``, ``x1..y2``, ``cls``, ``conf``).
        gt: Ground-truth table of the split (``image_id``, ``x1..y2``, ``cls``, ``crowd``).
        sizes: (n_images, 2) (width, height) per image id.
        scores: Scores to rank by (default ``boxes["conf"]``).
        max_dets: COCOeval's maxDets (the capture's max_det, so that no box is dropped).

    Returns:
        ``{"map50_95": ..., "map50": ..., "map75": ...}`` (-1 where undefined, as COCOeval).
    """
    return coco_maps(
        boxes,
        gt,
        sizes,
        [boxes["conf"].to_numpy() if scores is None else scores],
        max_dets=max_dets,
    )[0]


def same_ranking(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two scorings of the same boxes order every pair of boxes the same way.

    True when ``a_i > a_j`` exactly when ``b_i > b_j`` and ``a_i == a_j`` exactly when
    ``b_i == b_j``: the same weak order, ties included. COCOeval uses scores only to sort
    (per image and class, then per class across images), so under the same weak order every sort,
    every precision/recall curve and the mAP are identical: one evaluation proves both.

    Args:
        a, b: (n,) scores of the same boxes.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return False
    order = np.argsort(-a, kind="mergesort")
    sa, sb = a[order], b[order]
    # b must be non-increasing along a's order, with its ties exactly where a has its ties
    return bool(np.all(np.diff(sb) <= 0) and np.array_equal(np.diff(sa) == 0, np.diff(sb) == 0))


def coco_maps(
    boxes: pl.DataFrame,
    gt: pl.DataFrame,
    sizes: np.ndarray,
    scores: list[np.ndarray],
    *,
    max_dets: int = 300,
    engine: str = "pycocotools",
) -> list[dict[str, float]]:
    """:func:`coco_map` of the same boxes under several scorings (raw, calibrated...), with the
    ground-truth index built once.

    Args:
        boxes, gt, sizes, max_dets: As :func:`coco_map`.
        scores: One (n_boxes,) score vector per scoring.
        engine: ``pycocotools`` (COCOeval itself) or ``det_calib`` (:mod:`det_calib.evaluation.coco_engine`: the
            same figures, tests/evaluation/test_coco_engine.py, without a Python object per box).

    Returns:
        One :func:`coco_map` result per score vector.
    """
    if engine == "det_calib":
        return table_maps(boxes, gt, scores, max_dets=max_dets)
    if engine != "pycocotools":
        raise ValueError(f"unknown mAP engine {engine!r}; engines are {', '.join(MAP_ENGINES)}")
    from pycocotools.coco import COCO

    n_img = len(sizes)
    classes = sorted(set(gt["cls"].to_list()) | set(boxes["cls"].to_list()))
    g = gt.to_dict(as_series=False)
    anns = []
    for k in range(gt.height):
        w, h = g["x2"][k] - g["x1"][k], g["y2"][k] - g["y1"][k]
        anns.append(
            {
                "id": k + 1,
                "image_id": int(g["image_id"][k]),
                "category_id": int(g["cls"][k]),
                "bbox": [g["x1"][k], g["y1"][k], w, h],
                "area": w * h,
                "iscrowd": int(g["crowd"][k]),
            }
        )
    dataset = {
        "images": [
            {"id": i, "width": int(sizes[i][0]), "height": int(sizes[i][1])} for i in range(n_img)
        ],
        "annotations": anns,
        "categories": [{"id": c, "name": str(c)} for c in classes],
    }
    # inverted boxes (x2 < x1) become zero-area boxes, as in matching: they overlap nothing
    b = collapse_inverted(boxes).select("image_id", "x1", "y1", "x2", "y2", "cls").to_numpy()
    w, h = b[:, 3] - b[:, 1], b[:, 4] - b[:, 2]
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = dataset
        coco.createIndex()
    out = []
    for sc in scores:
        sc = np.asarray(sc, dtype=np.float64)
        dets = np.column_stack([b[:, 0], b[:, 1], b[:, 2], w, h, sc, b[:, 5]])
        out.append(_evaluate(coco, dets, max_dets))
    return out


def _evaluate(coco, dets: np.ndarray, max_dets: int) -> dict[str, float]:
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        res = coco.loadRes(dets) if len(dets) else None
        if res is None:
            return {"map50_95": 0.0, "map50": 0.0, "map75": 0.0}
        ev = COCOeval(coco, res, "bbox")
        ev.params.maxDets = [max_dets]
        ev.evaluate()
        ev.accumulate()
    # precision[T, R, K, A, M]: IoU thresholds x 101 recall points x classes x area ranges x maxDets;
    # area range 0 is "all". COCO's summarize() hard-codes maxDets=100 for mAP50-95, so read it here.
    prec = ev.eval["precision"][:, :, :, 0, 0]

    def mean_valid(x: np.ndarray) -> float:
        v = x[x > -1]
        return float(v.mean()) if v.size else -1.0

    iou_thrs = ev.params.iouThrs
    return {
        "map50_95": mean_valid(prec),
        "map50": mean_valid(prec[np.isclose(iou_thrs, 0.5)]),
        "map75": mean_valid(prec[np.isclose(iou_thrs, 0.75)]),
    }


def _val_kwargs(
    yolo,
    data: str | Path,
    *,
    split: str,
    head: str,
    conf: float,
    imgsz: int | None,
    batch: int,
    device: str | None,
) -> dict:
    """The arguments of every det_calib val: plain ``model.val()`` with plots, JSON and verbosity off."""

    kw = dict(
        data=str(data),
        split=split,
        conf=conf,
        imgsz=imgsz or default_imgsz(yolo),
        batch=batch,
        plots=False,
        save_json=False,
        verbose=False,
        nms=HEAD_PREDICT_NMS[head],
    )
    if device is not None:
        kw["device"] = device
    return kw


class ValIncomplete(RuntimeError):
    """An Ultralytics val pass that did not score every image: its NMS reached its time limit and
    dropped the boxes of the images it had not reached, so its mAP measures the clock."""


_NMS_TIMEOUT_MESSAGE = "NMS time limit"
"""How Ultralytics' ``non_max_suppression`` starts the warning it logs when it stops early."""


class _NMSTimeouts(logging.Handler):
    """Counts the NMS time-limit warnings Ultralytics' logger emits while attached."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if _NMS_TIMEOUT_MESSAGE in msg:
            self.messages.append(msg)


def _run_val(yolo, kw: dict, validator=None):
    """``yolo.val(**kw)`` with Ultralytics' info lines silenced and its run folder in a temporary one.

    Raises:
        ValIncomplete: Ultralytics' NMS reached its time limit in the pass (then no figure of the
            pass is returned: the images after the limit lost their boxes).
    """
    import tempfile

    from ultralytics.utils import LOGGER

    level = LOGGER.level
    LOGGER.setLevel(logging.WARNING)
    timeouts = _NMSTimeouts()
    LOGGER.addHandler(timeouts)
    try:
        with tempfile.TemporaryDirectory(
            prefix="det_calib_val_"
        ) as tmp:  # keep runs/ out of the cwd
            metrics = yolo.val(project=tmp, name="val", validator=validator, **kw)
    finally:
        LOGGER.removeHandler(timeouts)
        LOGGER.setLevel(level)
    if timeouts.messages:
        n = len(timeouts.messages)
        raise ValIncomplete(
            f"Ultralytics' NMS stopped early ({timeouts.messages[0].strip()}, {n} "
            f"time{'s' if n > 1 else ''}) "
            "and dropped the boxes of the images it had not reached: the pass's mAP is not reported"
        )
    return metrics


def ultralytics_val(
    model: str | Path,
    data: str | Path,
    *,
    split: str,
    head: str = "nms",
    conf: float = 0.001,
    imgsz: int | None = None,
    batch: int = 16,
    device: str | None = None,
    nms_time_limit: float | None = None,
    own_rule: bool = False,
) -> dict[str, float]:
    """Ultralytics ``model.val()`` mAP50-95 and mAP50 of a checkpoint on a split.

    Args:
        model: Checkpoint path.
        data: data.yaml path.
        split: Split key of the yaml.
        head: ``"nms"`` (default head + NMS) or ``"e2e"`` (``nms=False``).
        conf: Val's conf pre-filter (Ultralytics' default for val is 0.001).
        nms_time_limit: Seconds the NMS of one batch may take; None (default): no limit,
            :func:`det_calib.capture.predictor.nms_max_time_img` (Ultralytics' own is ``2.0 + 0.05 * batch``).
        own_rule: The run matched by its task's own rule: also return what its task's val adds under it (a
            segment model's mask mAP, ``mask_map50_95`` and ``mask_map50``; :func:`val_figures`). A segment model
            is validated by Ultralytics' ``SegmentationValidator`` either way.

    Raises:
        ValIncomplete: The NMS time limit was reached (only with a finite ``nms_time_limit``).
    """
    from ultralytics import YOLO

    yolo = YOLO(str(model))
    family = family_of(
        yolo
    )  # a registered model family (RT-DETR) is validated by its own validator: no NMS
    validator = (
        functools.partial(_budget_validator_class(_val_task(yolo)), nms_time_limit=nms_time_limit)
        if family is None
        else family.validator()
    )
    m = _run_val(
        yolo,
        _val_kwargs(
            yolo, data, split=split, head=head, conf=conf, imgsz=imgsz, batch=batch, device=device
        ),
        validator=validator,
    )
    return _val_figures(m, conf, own_rule=own_rule)


def _ultralytics_val_shared(
    original: str | Path,
    calibrated: str | Path,
    data: str | Path,
    *,
    split: str,
    head: str = "nms",
    conf: float = 0.001,
    original_conf: float = 0.001,
    imgsz: int | None = None,
    batch: int = 16,
    device: str | None = None,
    nms_time_limit: float | None = None,
    own_rule: bool = False,
) -> tuple[dict[str, float], dict[str, float]]:
    """One Ultralytics val pass that measures a calibrated checkpoint and its original.

    The calibrated checkpoint shares every weight with the original except inside the Detect
    head's classification branches (:mod:`det_calib.deploy.fold`), so the network up to the head computes
    the same neck features for both. This runs the stock ``YOLO(calibrated).val()`` (Ultralytics'
    own DetectionValidator: its dataloader, letterbox, batching, postprocess and metrics give the
    calibrated figures, exactly what plain val prints wherever its NMS does not run out of time: here
    it has no time limit) and, on the features each batch feeds the
    calibrated head, also runs the original checkpoint's Detect head (prepared as val prepares a
    model: fused, same device, memory format and head mode); that output goes through the same
    validator's postprocess (at ``original_conf``) into a second Ultralytics metrics object. The
    original's figures are those of ``ultralytics_val(original, conf=original_conf)``, without its
    forward pass through the backbone and neck. :func:`ultralytics_val_heads` does the same for
    several heads in one pass.

    Args:
        original: The original checkpoint.
        calibrated: A checkpoint written by :mod:`det_calib.deploy.fold` from ``original``.
        data, split, head, imgsz, batch, device: As :func:`ultralytics_val`.
        conf: Val's conf pre-filter for the calibrated checkpoint.
        original_conf: Val's conf pre-filter for the original.
        nms_time_limit: As :func:`ultralytics_val`, for each of the two NMS calls of a batch.

    Returns:
        ``(original, calibrated)``, each as :func:`ultralytics_val` returns it.

    Raises:
        InputError: The two checkpoints differ outside the Detect head (a pair this cannot measure).
        ValIncomplete: The NMS time limit was reached, for either model (only with a finite
            ``nms_time_limit``).
    """
    return ultralytics_val_heads(
        original,
        calibrated,
        data,
        split=split,
        confs={head: (original_conf, conf)},
        imgsz=imgsz,
        batch=batch,
        device=device,
        nms_time_limit=nms_time_limit,
        own_rule=own_rule,
    )[head]


def ultralytics_val_heads(
    original: str | Path,
    calibrated: str | Path,
    data: str | Path,
    *,
    split: str,
    confs: Mapping[str, tuple[float, float]],
    imgsz: int | None = None,
    batch: int = 16,
    device: str | None = None,
    nms_time_limit: float | None = None,
    own_rule: bool = False,
) -> dict[str, tuple[dict[str, float], dict[str, float]]]:
    """One Ultralytics val pass that measures every head of a calibrated checkpoint and of its original.

    The first head of ``confs`` is the stock ``YOLO(calibrated).val()`` in that head's mode (as
    :func:`_ultralytics_val_shared`). Every other Detect head runs on the neck features each batch feeds
    the stock one (:func:`~det_calib.evaluation.val_riders.rider_specs`), goes through the same
    validator's postprocess (in its head's mode, at its conf) and Ultralytics' own ``update_metrics``
    into a metrics object of its own. Every figure equals that of a separate stock val of that
    checkpoint in that mode at that conf (tests/evaluation/test_map_check.py), with one backbone and
    neck pass instead of one per head; the original's heads read the layers they share with the
    calibrated ones (:mod:`det_calib.evaluation.val_riders`).

    Args:
        original, calibrated, data, split, imgsz, batch, device, nms_time_limit: As
            :func:`_ultralytics_val_shared`.
        confs: Head (``"nms"``, ``"e2e"``) -> ``(original_conf, calibrated_conf)``: val's conf
            pre-filter of each side in that head.
        own_rule: As :func:`ultralytics_val` (a segment model's pass scores masks either way).

    Returns:
        Head -> ``(original, calibrated)``, each as :func:`ultralytics_val` returns it.

    Raises:
        InputError: The two checkpoints differ outside the Detect head.
        ValIncomplete: The NMS time limit was reached in the pass (only with a finite ``nms_time_limit``).
    """
    from ultralytics import YOLO

    heads = list(confs)
    if not heads:
        raise ValueError("`confs` must name at least one head")
    first = heads[0]
    yolo = YOLO(str(calibrated))
    orig = YOLO(str(original)).model
    _check_same_trunk(orig, yolo.model, original, calibrated)
    if (
        family_of(yolo) is not None
    ):  # a model family's head rides on no shared pass: one stock val of each
        return _separate_vals(
            original, calibrated, data, confs, split, imgsz, batch, device, nms_time_limit, own_rule
        )
    riders = rider_specs(orig, yolo.model, heads, confs)
    del orig
    kw = _val_kwargs(
        yolo,
        data,
        split=split,
        head=first,
        conf=confs[first][1],
        imgsz=imgsz,
        batch=batch,
        device=device,
    )
    v = _shared_validator_class(_val_task(yolo))
    out: dict[tuple[str, str], Any] = {}
    m = _run_val(
        yolo,
        kw,
        validator=functools.partial(v, riders=riders, out=out, nms_time_limit=nms_time_limit),
    )
    out[("calibrated", first)] = m

    return {
        h: (
            _val_figures(out[("original", h)], confs[h][0], own_rule=own_rule),
            _val_figures(out[("calibrated", h)], confs[h][1], own_rule=own_rule),
        )
        for h in heads
    }


def _separate_vals(
    original, calibrated, data, confs, split, imgsz, batch, device, nms_time_limit, own_rule
) -> dict:
    """:func:`ultralytics_val_heads`' figures from one stock val of each checkpoint per head (a model family's)."""
    kw = dict(
        split=split,
        imgsz=imgsz,
        batch=batch,
        device=device,
        nms_time_limit=nms_time_limit,
        own_rule=own_rule,
    )
    return {
        h: (
            ultralytics_val(original, data, head=h, conf=c0, **kw),
            ultralytics_val(calibrated, data, head=h, conf=c1, **kw),
        )
        for h, (c0, c1) in confs.items()
    }


def _val_figures(metrics: Any, conf: float, *, own_rule: bool = False) -> dict[str, float]:
    """What a det_calib val reports of Ultralytics' metrics: ``conf``, the box ``map50_95`` and ``map50`` (an OBB
    model's ``OBBMetrics``: of its rotated boxes, matched by ProbIoU), and what each task's own metrics add
    (:meth:`~det_calib.tasks.contract.Task.val_figures`: with ``own_rule``, a run matched by its task's own rule,
    a segment model's mask ``mask_map50_95`` and ``mask_map50``; a pose model's keypoint ``pose_map50_95`` and
    ``pose_map50`` always)."""
    out = {
        "conf": float(conf),
        "map50_95": float(metrics.box.map),
        "map50": float(metrics.box.map50),
    }
    for task in TASKS.values():
        out.update(task.val_figures(metrics, own_rule=own_rule))
    return out


def _val_task(yolo: Any) -> str:
    """The validator task of a loaded ``YOLO``: its registered task (``detect`` for a task det_calib does not
    know), whose own Ultralytics validator a det_calib val runs (:func:`_budget_validator_class`)."""
    task = getattr(yolo, "task", None)
    return task if task in task_names() else "detect"


def _check_same_trunk(a, b, pa: str | Path, pb: str | Path) -> None:
    """Refuse two models whose layers before the Detect head differ in any parameter or buffer."""
    import torch

    sa, sb = a.model[:-1].state_dict(), b.model[:-1].state_dict()
    if sa.keys() != sb.keys() or any(not torch.equal(sa[k].float(), sb[k].float()) for k in sa):
        raise InputError(
            f"{pb} is not {pa} with a calibrated head: the layers before the Detect head differ"
        )


@functools.cache
def _budget_validator_class(task: str = "detect"):
    """Ultralytics' validator of ``task`` (``DetectionValidator``; ``SegmentationValidator`` for ``segment``: its
    masks and mask metrics on top; ``PoseValidator`` for ``pose``: keypoints and OKS; ``OBBValidator`` for
    ``obb``: rotated boxes and ProbIoU) with a wall-clock budget of its choosing for the NMS."""
    from ultralytics.models.yolo.detect import DetectionValidator
    from ultralytics.utils import nms

    hooks = get_task(task)

    class BudgetValidator(DetectionValidator):
        """The stock detection validator; its ``postprocess`` is the stock one (Ultralytics 8.4) with
        one more argument to ``non_max_suppression``: the time budget (none by default), so that on
        a slow or busy CPU no batch loses boxes to the clock. tests/evaluation/test_map_check.py checks that it
        returns exactly the stock postprocess's tensors."""

        def __init__(self, *args, nms_time_limit: float | None = None, **kwargs):
            super().__init__(*args, **kwargs)
            self.nms_time_limit = nms_time_limit  # None: no limit (nms_max_time_img)

        def postprocess(self, preds):
            first = preds[0] if isinstance(preds, (list, tuple)) else preds
            outputs = nms.non_max_suppression(
                preds,
                self.args.conf,
                self.args.iou,
                multi_label=True,
                agnostic=self.args.single_cls or self.args.agnostic_nms,
                max_det=self.args.max_det,
                end2end=self.end2end,
                **hooks.nms_args(self.nc),
                max_time_img=nms_max_time_img(self.nms_time_limit, first.shape[0]),
            )
            return [
                {"bboxes": x[:, :4], "conf": x[:, 4], "cls": x[:, 5], "extra": x[:, 6:]}
                for x in outputs
            ]

    if hooks.validator == ("detect", "DetectionValidator"):
        return BudgetValidator
    stock = _task_validator(task)

    class TaskBudgetValidator(stock, BudgetValidator):
        """The stock segment, pose or OBB validator: its ``postprocess`` builds the masks, reshapes the keypoints
        or appends the angle on the boxes of the budgeted NMS above (its ``super()`` is that postprocess, which
        already carries the task's extra channels and rotated NMS); everything else is the stock validator's."""

        def __init__(self, *args, nms_time_limit: float | None = None, **kwargs):
            super().__init__(*args, **kwargs)
            self.nms_time_limit = nms_time_limit  # None: no limit (nms_max_time_img)

    return TaskBudgetValidator


def _task_validator(task: str):
    """Ultralytics' own validator class of a segment, pose or OBB model."""
    import importlib

    module, name = get_task(task).validator
    return getattr(importlib.import_module(f"ultralytics.models.yolo.{module}"), name)


@functools.cache
def _shared_validator_class(task: str = "detect"):
    """Ultralytics' validator of ``task`` (with the NMS budget of :func:`_budget_validator_class`),
    extended to score further Detect (or Segment) heads on the same pass."""
    from ultralytics.nn.autobackend import AutoBackend

    class SharedPassValidator(_budget_validator_class(task)):
        """Stock detection val of the calibrated model; other heads ride on its forward pass.

        Everything of the stock validator runs unchanged for the calibrated model (its NMS without a
        time budget, :func:`_budget_validator_class`). Added: a hook on its Detect head keeps the
        features each batch feeds it; after the stock ``update_metrics``, each rider's Detect head
        (:func:`ultralytics_val_heads`) runs on them, its output goes through the same
        ``postprocess`` (with val's conf and head mode set to the rider's) and the stock
        ``update_metrics`` into the rider's own ``DetMetrics``, processed by the stock code at the end.
        """

        def __init__(self, *args, riders: list, out: dict, **kwargs):
            super().__init__(*args, **kwargs)
            self._rider_specs, self._out = riders, out
            self._feats = None

        def init_metrics(self, model):
            super().init_metrics(model)
            if self.args.save_json or self.args.save_txt or self.args.plots or self.args.augment:
                raise ValueError(
                    "the shared val pass runs with save_json, save_txt, plots and augment off"
                )
            self._riders = []
            for side, head, rider_model, end2end, conf in self._rider_specs:
                # prepared exactly as BaseValidator prepares a model for a standalone val in that head's
                # mode (the model was loaded or copied for this pass alone: fused in place, as val fuses its copy)
                backend = AutoBackend(
                    model=rider_model,
                    device=self.device,
                    dnn=self.args.dnn,
                    data=self.args.data,
                    fp16=self.args.quantize == 16,
                    channels_last=self.args.channels_last,
                    end2end=end2end,
                    verbose=False,
                )
                backend.eval()
                if bool(getattr(backend, "end2end", False)) != end2end:
                    raise ValueError(f"the {side} model cannot run the {head} head")
                native = backend.model
                if end2end and hasattr(
                    native, "set_head_attr"
                ):  # as init_metrics sets it on the validated one
                    native.set_head_attr(
                        max_det=self.args.max_det, agnostic_nms=self.args.agnostic_nms
                    )
                metrics = type(self.metrics)(
                    names=model.names
                )  # DetMetrics; SegmentMetrics for masks
                metrics.clear_stats()
                metrics.clear_image_metrics()
                self._riders.append(
                    (side, head, backend.from_numpy, native.model[-1], end2end, conf, metrics)
                )
            self._rider_specs = []  # the riders keep only what they run
            det = (model.model if getattr(model, "format", None) == "pt" else model).model[-1]
            share_with_originals(det, [(side, h, d) for side, h, _, d, *_ in self._riders])
            # a list copy: a head's forward may replace the list's items with its own outputs
            det.register_forward_pre_hook(
                lambda module, args: setattr(self, "_feats", list(args[0]))
            )

        def update_metrics(self, preds, batch):
            super().update_metrics(preds, batch)
            feats, self._feats = self._feats, None
            conf, seen, metrics, end2end = self.args.conf, self.seen, self.metrics, self.end2end
            try:
                for _, _, from_numpy, det, rider_e2e, rider_conf, rider_metrics in self._riders:
                    y = det(list(feats))
                    # what AutoBackend.forward returns for a native model's output
                    y = (
                        (from_numpy(y[0]) if len(y) == 1 else [from_numpy(t) for t in y])
                        if isinstance(y, (list, tuple))
                        else from_numpy(y)
                    )
                    self.args.conf, self.end2end, self.seen = rider_conf, rider_e2e, seen
                    rider_preds = self.postprocess(y)
                    self.metrics = rider_metrics
                    super().update_metrics(rider_preds, batch)
            finally:
                self.args.conf, self.seen, self.metrics, self.end2end = conf, seen, metrics, end2end

        def get_stats(self):
            for side, head, *_, rider_metrics in self._riders:
                rider_metrics.process(save_dir=self.save_dir, plot=False, on_plot=self.on_plot)
                rider_metrics.clear_stats()
                self._out[(side, head)] = rider_metrics
            return super().get_stats()

    return SharedPassValidator


def eval_figures(ev) -> dict[str, float]:
    """mAP50-95, mAP50, mAP75 of an accumulated COCOeval (``segm`` or ``keypoints``) at area ``all`` and its one
    maxDets (as the box check)."""
    prec = ev.eval["precision"][:, :, :, 0, 0]

    def mean_valid(x: np.ndarray) -> float:
        v = x[x > -1]
        return float(v.mean()) if v.size else -1.0

    thr = ev.params.iouThrs
    return {
        "map50_95": mean_valid(prec),
        "map50": mean_valid(prec[np.isclose(thr, 0.5)]),
        "map75": mean_valid(prec[np.isclose(thr, 0.75)]),
    }
