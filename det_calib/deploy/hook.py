"""A predict-time hook: :func:`attach` makes a plain Ultralytics ``model.predict(...)`` return a run's
calibrated scores, for any calibrator (foldable or not, size-conditioned included); :func:`detach`
gives the model back as it was.

How it works. ``attach`` gives the ``YOLO`` object a subclass of its own class whose only change is
the predictor it builds: a subclass of Ultralytics' ``DetectionPredictor`` whose ``postprocess``
does what the stock one does (NMS or the one-to-one top-k, Ultralytics' own code), asking NMS for
the indices of the boxes it kept, and reads the pre-sigmoid class scores of the head at those
anchors (Ultralytics' ``Results`` keep only the winning class's score). The network, its weights
and every other step of ``predict`` are Ultralytics' own; nothing is patched on the network.

Each image's boxes are the detector's at the run's capture floor (``conf_floor``, 0.001 by
default: the boxes the run was fitted and evaluated on), scored by the run's calibrator of the head
that ran (``nms=False``: ``e2e``), then kept where the **calibrated** conf is above predict's
``conf`` and ordered by it. So at the run's own settings (``batch=1``, the run's ``imgsz``), a box's
conf equals the run's ``calibrated`` column (the same float32 logits, the same map). Boxes keep the
class the detector gave them.

Each result also carries ``calibrated_probs``: a float64 ``(n, nc)`` NumPy array, row ``i`` the
calibrated probability of every class for ``result.boxes[i]`` (the map applied to that box's logit
of each class; a per-class map uses each class's own map, a size map the box's size). Column
``boxes.cls[i]`` equals ``boxes.conf[i]`` (up to float32). Indexing a ``Results`` (``r[:3]``) or
moving it (``r.cpu()``) builds a new object without it.

>>> model = det_calib.attach(YOLO("yolo26n_shapes.pt"), "runs/demo")  # doctest: +SKIP
>>> r = model.predict("image.jpg")[0]  # doctest: +SKIP
>>> r.boxes.conf, r.calibrated_probs  # doctest: +SKIP
>>> det_calib.detach(model)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from det_calib.calibrators.base import LogitCalibrator, log_area
from det_calib.capture.family_registry import family_of
from det_calib.capture.predictor import load_detector
from det_calib.data.box_view import BoxView
from det_calib.deploy.posthoc import load_calibrators
from det_calib.errors import InputError
from det_calib.numeric import sigmoid
from det_calib.record.run_result import RunResult
from det_calib.tasks import Task, get_task

__all__ = ["Hook", "attach", "detach"]

_log = logging.getLogger(__name__)

_HOOK_ATTR = "det_calib_hook"
"""The attribute of an attached ``YOLO`` object that holds its :class:`Hook`."""

_DEFAULT_FLOOR = 0.001


@dataclass(frozen=True)
class Hook:
    """What :func:`attach` installed: the run's calibrators (head -> calibrator), the raw conf floor
    the boxes are taken at, and what :func:`detach` restores (the model's class and predictor)."""

    calibrators: dict[str, LogitCalibrator]
    floor: float
    run: str
    original_class: type
    original_predictor: Any


def _hook_of(model: Any) -> Hook | None:
    """The :class:`Hook` of an attached model, else None."""
    return model.__dict__.get(_HOOK_ATTR) if hasattr(model, "__dict__") else None


def _run_record(run: Any) -> tuple[Any, str]:
    """``(calibration, label)``: what :func:`~det_calib.deploy.posthoc.load_calibrators` reads, from a
    run folder, its ``calibration.json``, a loaded run (:class:`~det_calib.record.run_folder.Run`) or a
    :class:`~det_calib.record.run_result.RunResult`."""

    if isinstance(run, (str, Path)):
        p = Path(run)
        p = p / "calibration.json" if p.is_dir() else p
        if not p.is_file():
            raise InputError(
                f"no calibration.json at {run} (expected a run folder of `det-calib calibrate`)"
            )
        return RunResult.read(p), str(p)
    result = getattr(run, "result", run)
    if isinstance(result, RunResult):
        return result, str(getattr(run, "run_dir", "a loaded run"))
    raise InputError(
        "Expected argument `run` to be a run folder, its calibration.json, a loaded run or a "
        "RunResult, "
        f"but got {type(run).__name__}"
    )


def attach(model: Any, run: Any) -> Any:
    """Install a run's calibration into an Ultralytics ``YOLO`` detector's ``predict``.

    Args:
        model: An ``ultralytics.YOLO`` detection model loaded from a ``.pt`` (the hook needs the
            raw class logits, which exported engines do not give).
        run: A run folder of ``det-calib calibrate``, its ``calibration.json``, or a loaded run.

    Returns:
        ``model`` (the same object), attached: ``model.predict(...)`` / ``model(...)`` return
        calibrated ``Results`` with ``calibrated_probs`` (see the module docstring). Attaching an
        attached model replaces its hook.

    Raises:
        InputError: Not a YOLO detector, or its classes differ from the run's.
    """

    if _hook_of(model) is not None:
        detach(model)
    if (family := family_of(load_detector(model))) is not None:  # InputError unless a YOLO detector
        raise InputError(
            f"attach installs a YOLO detect head's predictor, not one of a model of family "
            f"`{family.name}`: deploy its run's calibrated.pt"
        )
    result, label = _run_record(run)
    names = [model.names[k] for k in sorted(model.names)]
    if list(result.class_names) != names:
        raise InputError(
            f"the model's {len(names)} classes differ from the run's {len(result.class_names)} "
            f"({label}): attach the run of this detector"
        )
    cals = load_calibrators(result)
    if not cals:
        raise InputError(f"the run {label} has no calibrator")
    floor = result.settings.conf_floor if result.settings.conf_floor > 0 else _DEFAULT_FLOOR
    hook = Hook(cals, float(floor), label, type(model), model.predictor)
    model.__dict__[_HOOK_ATTR] = hook
    model.__class__ = _attached_class(type(model), _predictor_class(model, hook))
    model.predictor = None  # the next predict builds the calibrated predictor
    _log.info("attached %s (heads %s) to %s", label, ", ".join(sorted(cals)), type(model).__name__)
    return model


def detach(model: Any) -> Any:
    """Remove what :func:`attach` installed: the model's own class and predictor object come back,
    so ``predict`` gives the raw scores bit for bit. A model that is not attached is returned as is."""
    hook = _hook_of(model)
    if hook is None:
        return model
    model.__class__ = hook.original_class
    model.predictor = hook.original_predictor
    del model.__dict__[_HOOK_ATTR]
    return model


def _attached_class(base: type, predictor: type) -> type:
    """``base`` whose ``_smart_load("predictor")`` (what ``Model.predict`` builds its predictor with)
    gives ``predictor``; everything else is ``base``'s."""

    def _smart_load(self: Any, key: str) -> Any:
        return predictor if key == "predictor" else base._smart_load(self, key)

    return type(
        f"Calibrated{base.__name__}", (base,), {"_smart_load": _smart_load, "__module__": __name__}
    )


def _predictor_class(model: Any, hook: Hook) -> type:
    """The calibrated subclass of the model's own predictor, bound to ``hook``."""
    stock = model._smart_load("predictor")  # noqa: SLF001  (the model's own predictor class)
    return type(
        "CalibratedDetectionPredictor",
        (CalibratedPostprocess, stock),
        {"hook": hook, "__module__": __name__},
    )


class CalibratedPostprocess:
    """The ``postprocess`` of the calibrated predictor (mixed into Ultralytics' ``DetectionPredictor``)."""

    hook: Hook

    def postprocess(self, preds: Any, img: Any, orig_imgs: Any, **kwargs: Any) -> list[Any]:
        from ultralytics.utils import ops

        if not (
            isinstance(preds, (tuple, list)) and len(preds) == 2 and isinstance(preds[1], dict)
        ):
            raise InputError(
                "det_calib.attach needs the detector's raw class logits: a .pt model, and predict "
                "without augment=True"
            )
        e2e = bool(getattr(self.model, "end2end", False))
        head = "e2e" if e2e else "nms"
        cal = self.hook.calibrators.get(head)
        if cal is None:
            raise InputError(
                f"the run {self.hook.run} has no calibrator for head {head} (it has "
                f"{', '.join(sorted(self.hook.calibrators))})"
            )
        if not isinstance(orig_imgs, list):  # as Ultralytics: a tensor batch
            orig_imgs = ops.convert_torch2numpy_batch(orig_imgs)[..., ::-1]
        kept = _raw_boxes(self, preds, e2e)
        out, probs = [], []
        for (det, lg), orig in zip(kept, orig_imgs):
            d, p = _calibrated(
                det,
                lg,
                cal,
                img.shape[2:],
                orig.shape,
                float(self.args.conf),
                task=get_task(self.args.task),
            )
            out.append(d)
            probs.append(p)
        results = self.construct_results(out, img, orig_imgs)
        for r, p in zip(results, probs):
            r.calibrated_probs = p
        return results


def _raw_boxes(predictor: Any, preds: Any, e2e: bool) -> list[tuple[Any, Any]]:
    """Per image: the detector's boxes at the hook's floor ``(n, 6)`` (Ultralytics' NMS / top-k) and
    their class logits ``(n, nc)`` read at the kept anchors."""
    from ultralytics.utils import nms

    y, raw = preds
    args = predictor.args
    # a pose or OBB model's keypoints or angle ride along after the class channels, its NMS rotated for OBB
    dets, keep = nms.non_max_suppression(
        y,
        min(float(args.conf), predictor.hook.floor),
        args.iou,
        args.classes,
        args.agnostic_nms,
        max_det=args.max_det,
        end2end=e2e,
        return_idxs=True,
        **get_task(args.task).nms_args(len(predictor.model.names)),
    )
    branch = raw.get("one2one") if e2e else raw.get("one2many", raw)
    scores = branch["scores"]  # (B, nc, anchors), pre-sigmoid
    if e2e:  # output rows are (anchor, class) pairs of the top-k: back to anchors, as the head chose them
        head = predictor.model.model.model[-1]
        _, _, anchor_of_row = head.get_topk_index(scores.sigmoid().permute(0, 2, 1), head.max_det)
    out = []
    for b, (det, k) in enumerate(zip(dets, keep)):
        k = k.long().view(-1)
        anchors = anchor_of_row[b, k] if e2e else k
        out.append((det, scores[b][:, anchors].T.float()))
    return out


def _calibrated(
    det: Any,
    lg: Any,
    cal: LogitCalibrator,
    shape: Any,
    orig_shape: Any,
    conf: float,
    *,
    task: Task | None = None,
) -> tuple[Any, np.ndarray]:
    """One image's boxes rescored by ``cal``, kept above ``conf`` (calibrated), ordered by it; and
    their calibrated probability of every class. ``task``: the model's (a detector's by default), whose
    :meth:`~det_calib.tasks.contract.Task.hull` sizes each box as the run's box table does (an OBB model's rows
    ``x y w h conf cls angle``: their rotated box's axis-aligned hull in the image)."""
    import torch

    n, nc = lg.shape
    if n == 0:
        return det, np.zeros((0, nc))
    h, w = int(orig_shape[0]), int(orig_shape[1])
    hull = (task or get_task("detect")).hull(det, shape, (h, w))
    xyxy = hull.detach().cpu().double().numpy()
    k = det[:, 5].detach().cpu().numpy().astype(np.int64)
    logits = (
        lg.detach().cpu().numpy().astype(np.float64)
    )  # the float32 logits, as the capture keeps them
    la = log_area(xyxy, np.full(n, w), np.full(n, h))
    z = logits[np.arange(n), k]
    view = BoxView(
        logit=z,
        conf=det[:, 4].detach().cpu().double().numpy(),
        correct=None,
        cls=k,
        image_id=np.zeros(n, np.int64),
        log_area=la,
    )
    new = view.scored(cal).conf
    flat = logits.ravel()
    every = (
        BoxView(
            logit=flat,
            conf=sigmoid(flat),
            correct=None,
            cls=np.tile(np.arange(nc), n),
            image_id=np.zeros(n * nc, np.int64),
            log_area=np.repeat(la, nc),
        )
        .scored(cal, from_logit=True)
        .conf
    )
    order = np.argsort(-new, kind="stable")
    order = order[new[order] > conf]
    out = det[torch.as_tensor(order, dtype=torch.long, device=det.device)].clone()
    out[:, 4] = torch.as_tensor(new[order], dtype=out.dtype, device=out.device)
    return out, every.reshape(n, nc)[order]
