"""Fold temperatures into a checkpoint that plain Ultralytics loads and runs.

The last layer of every ``cv3[i]`` (one-to-many branch) and ``one2one_cv3[i]`` (one-to-one
branch) of the ``Detect`` head (and of a segment, pose or OBB model's ``Segment`` / ``Segment26``, ``Pose`` /
``Pose26`` or ``OBB`` / ``OBB26`` head, a ``Detect`` head whose task branch ``cv4`` -- mask
coefficients and prototypes, keypoints, the angle -- is left as it is) is a plain
``Conv2d(c, nc, 1, bias=True)`` followed only by the sigmoid, so dividing its weight and bias by T
gives exactly ``sigmoid(z / T)``. Nothing custom is needed at load time: the checkpoint holds a
standard Ultralytics model (saved in float32, since an fp16 save would round W/T) and a plain
``det_calib`` dict of metadata.
"""

from __future__ import annotations

import copy
import datetime as _dt
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from det_calib.calibrators.base import LogitCalibrator
from det_calib.capture.family_registry import family_of
from det_calib.data.box_table import HEAD_BRANCH
from det_calib.deploy.export_layout import map_name
from det_calib.errors import InputError, first_line
from det_calib.io import atomic_path
from det_calib.record.calibrator_record import calibrator_of
from det_calib.record.run_result import read_calibrators
from det_calib.tasks import task_names

_log = logging.getLogger(__name__)

_BRANCHES = HEAD_BRANCH
"""Head mode -> name of the classification branch of the Detect head (:data:`det_calib.data.box_table.HEAD_BRANCH`)."""


def _cls_convs(model: torch.nn.Module, head: str) -> list[torch.nn.Module]:
    """The layers whose output channels are ``head``'s class logits: the last conv of each level of a YOLO
    detect head's class branch, or what a registered model family names (RT-DETR: the last decoder layer's
    ``Linear`` class head; :mod:`det_calib.capture.family_registry`)."""
    family = family_of(model)
    if family is not None:
        return family.score_layers(model, head)
    det = model.model[-1]
    branch = getattr(det, _BRANCHES[head], None)
    if branch is None:
        raise InputError(
            f"the model has no {_BRANCHES[head]} branch to fold the `{head}` temperature into"
        )
    convs = []
    for level in branch:
        last = level[-1] if isinstance(level, torch.nn.Sequential) else level
        if not isinstance(last, torch.nn.Conv2d) or last.bias is None or last.kernel_size != (1, 1):
            raise InputError(
                f"unexpected classification layer {type(last).__name__} in {_BRANCHES[head]}: "
                "expected a 1x1 Conv2d with bias"
            )
        if last.out_channels != det.nc:
            raise InputError(
                f"{_BRANCHES[head]} ends in a conv with {last.out_channels} outputs, not one per "
                f"class ({det.nc}): "
                "not a plain YOLO classification branch, a temperature cannot be folded into it"
            )
        convs.append(last)
    return convs


def _fold_into_model(model: torch.nn.Module, temperatures: dict[str, float]) -> torch.nn.Module:
    """Divide the last classification conv of each calibrated branch by its temperature, in place.

    Args:
        model: An Ultralytics ``DetectionModel`` (unfused: both branches present where they exist).
        temperatures: Head mode (``"nms"``, ``"e2e"``) -> T > 0.

    Returns:
        ``model``, in float32.
    """
    model.float()
    for head, t in temperatures.items():
        if head not in _BRANCHES:
            raise InputError(f"Expected head names in {sorted(_BRANCHES)}, but got {head!r}")
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t > 0):
            raise InputError(
                f"temperature for head `{head}` must be a finite positive number, got {t}"
            )
        with torch.no_grad():
            for conv in _cls_convs(model, head):
                conv.weight.div_(t)
                conv.bias.div_(t)
    return model


def _load_detection_checkpoint(source: Path) -> tuple[dict[str, Any], torch.nn.Module]:
    """The checkpoint dict of ``source`` and a copy of its model (EMA weights where present)."""
    if not source.is_file():
        raise InputError(f"model file not found: {source}")
    try:
        ckpt = torch.load(source, map_location="cpu", weights_only=False)
    except Exception as e:
        raise InputError(f"cannot load checkpoint {source}: {first_line(e)}") from None
    if not isinstance(ckpt, dict) or ckpt.get("model") is None and ckpt.get("ema") is None:
        raise InputError(f"{source} is not an Ultralytics checkpoint (no `model` entry)")
    model = copy.deepcopy(ckpt.get("ema") or ckpt["model"])
    task = getattr(model, "task", None) or (ckpt.get("train_args") or {}).get("task", "detect")
    # every registered task's checkpoint takes a fold: a segment, pose or OBB head is a ``Detect`` head whose class
    # branch (``cv3``, ``one2one_cv3``) scores every box as a detector's does; the task branch (``cv4``) rides
    # beside it untouched, so the boxes and each task's payload are the original's
    if task not in task_names() or not hasattr(model.model[-1], "cv3") and family_of(model) is None:
        raise InputError(
            f"{source} is a `{task}` model: only {', '.join(task_names())} models can be "
            "calibrated "
            "(their class branch scores every box)"
        )
    return ckpt, model


def _save_checkpoint(
    ckpt: dict[str, Any], model: torch.nn.Module, out: str | Path, record: dict[str, Any]
) -> None:
    """Write ``ckpt`` with ``model`` as its only weights (no EMA, no optimizer) and det_calib's
    ``record``, atomically."""
    new = {
        k: v
        for k, v in ckpt.items()
        if k not in ("optimizer", "ema", "updates", "model", "det_calib")
    }
    new.update(model=model, ema=None, optimizer=None, det_calib=record)
    with atomic_path(out) as tmp:
        torch.save(new, tmp)


def write_calibrated_checkpoint(
    source: str | Path,
    out: str | Path,
    temperatures: dict[str, float],
    *,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write ``out``: the checkpoint ``source`` with ``temperatures`` folded in, in float32.

    The file is written atomically. ``ckpt["det_calib"]`` holds the temperatures, the folded
    branches, the original checkpoint path and ``metadata`` (plain JSON-like values only, so
    the checkpoint loads without det_calib installed). Folding an already calibrated checkpoint
    composes the temperatures and records the product.

    Returns:
        ``out``.
    """
    source = Path(source)
    ckpt, model = _load_detection_checkpoint(source)
    _fold_into_model(model, temperatures)
    previous = ckpt.get("det_calib") or {}
    total = dict(previous.get("temperature", {}))
    for head, t in temperatures.items():
        total[head] = total.get(head, 1.0) * float(t)
    _save_checkpoint(
        ckpt,
        model,
        out,
        {
            "temperature": total,
            "folded_into": {h: _BRANCHES[h] for h in total},
            "source_checkpoint": str(source.resolve()),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            **(metadata or {}),
        },
    )
    _log.info(
        "wrote calibrated checkpoint %s (%s)",
        out,
        ", ".join(f"{h}: T = {t:.4f}" for h, t in total.items()),
    )
    return Path(out)


def read_calibration_metadata(path: str | Path) -> dict[str, Any] | None:
    """The ``det_calib`` dict of a calibrated checkpoint, or None for an uncalibrated one."""
    ckpt = torch.load(Path(path), map_location="cpu", weights_only=False)
    return ckpt.get("det_calib") if isinstance(ckpt, dict) else None


def _temperatures_from_json(path: str | Path) -> dict[str, float]:
    """The per-head temperatures of a ``calibration.json`` (read by :func:`~det_calib.record.read_calibrators`).

    Raises:
        InputError: The file is missing or damaged, has no temperature, or a head's calibrator is
            not a temperature (only a temperature folds into the checkpoint).
    """

    path = Path(path)
    calibrators = read_calibrators(path)
    if not calibrators:
        raise InputError(f"{path} has no `temperature` mapping (head -> T)")
    out = {}
    for head, c in calibrators.items():
        if c.temperature is None:
            raise InputError(
                f"{path}: the `{head}` calibrator is `{c.method}`, not a temperature: it cannot be "
                "folded"
            )
        out[head] = c.temperature
    return out


# --------------------------------------------------------------------------------------------
# any calibrator: affine maps into the last conv, piecewise-linear maps as appended hinge layers


def affine_tensors(
    calibrator: LogitCalibrator, nc: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(a, b)`` per class (length nc) when ``calibrator`` is affine in the logit, else None."""
    ab = (
        calibrator.affine_params(nc)
        if getattr(calibrator, "deploy_form", None) == "affine"
        else None
    )
    if ab is None:
        return None
    a, b = (np.asarray(v, dtype=np.float64).tolist() for v in ab)
    return torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)


def hinge_tensors(calibrator: LogitCalibrator, nc: int) -> list | None:
    """One piecewise-linear map per class when ``calibrator`` is folded as hinge layers, else None."""
    return (
        calibrator.hinge_maps(nc) if getattr(calibrator, "deploy_form", None) == "hinges" else None
    )


def hinge_layers(maps: list, nc: int, *, dtype: torch.dtype = torch.float32) -> torch.nn.Sequential:
    """Stock torch layers computing ``maps[c](z_c)`` on each class channel ``c`` of an (B, nc, H, W) map.

    Each map is ``c0 + s0 z + sum_j coef_j relu(z - x_j)`` (:meth:`PiecewiseLinear.hinges`); with
    ``s0 z = s0 relu(z) - s0 relu(-z)`` it is a 1x1 grouped conv expanding every class channel
    into ``K + 2`` channels (``z - x_j``, ``z``, ``-z``), a ReLU, and a 1x1 grouped conv summing
    them back with the coefficients. Only ``Conv2d`` and ``ReLU``: a checkpoint holding them
    loads in plain Ultralytics and exports like any conv net.
    """
    parts = [m.hinges() for m in maps]
    k = max(p[2].size for p in parts) + 2
    w1 = torch.zeros(nc * k, 1, 1, 1, dtype=torch.float64)
    b1 = torch.zeros(nc * k, dtype=torch.float64)
    w2 = torch.zeros(nc, k, 1, 1, dtype=torch.float64)
    b2 = torch.zeros(nc, dtype=torch.float64)
    for c, (c0, s0, x, coef) in enumerate(parts):
        base = c * k
        kj = x.size
        w1[base : base + kj, 0, 0, 0] = 1.0  # z - x_j (unused padding channels stay 0)
        w1[base + k - 2, 0, 0, 0] = 1.0  # z
        w1[base + k - 1, 0, 0, 0] = -1.0  # -z
        b1[base : base + kj] = torch.from_numpy(-x)
        w2[c, :kj, 0, 0] = torch.from_numpy(coef)
        w2[c, k - 2, 0, 0] = s0
        w2[c, k - 1, 0, 0] = -s0
        b2[c] = c0
    expand = torch.nn.Conv2d(nc, nc * k, 1, groups=nc, bias=True, dtype=dtype)
    collapse = torch.nn.Conv2d(nc * k, nc, 1, groups=nc, bias=True, dtype=dtype)
    with torch.no_grad():
        expand.weight.copy_(w1)
        expand.bias.copy_(b1)
        collapse.weight.copy_(w2)
        collapse.bias.copy_(b2)
    return torch.nn.Sequential(expand, torch.nn.ReLU(), collapse)


def _fold_calibrator(
    model: torch.nn.Module, head: str, calibrator: LogitCalibrator
) -> torch.nn.Module:
    """Fold a fitted calibrator into the classification branch of ``head``, in place, in float32.

    Affine maps (temperature, Platt, per-class temperature/Platt, ``none``) scale and shift the
    output channels of the last 1x1 conv of every ``cv3[i]`` / ``one2one_cv3[i]``. Piecewise-linear
    maps (spline, isotonic global or per class) append :func:`hinge_layers` to every ``cv3[i]`` Sequential, so the
    branch outputs ``map_c(z_c)`` and Ultralytics' sigmoid gives the calibrated score.

    Per-class maps can change which class wins an anchor (the NMS path) and which
    (anchor, class) pairs make the top-k (the NMS-free path): measure detections before and after.

    Args:
        model: An Ultralytics ``DetectionModel``.
        head: ``"nms"`` or ``"e2e"``.
        calibrator: A fitted calibrator from :mod:`det_calib.selection.cross_validation` / ``scaling`` / ``isotonic``.

    Returns:
        ``model``.

    Raises:
        InputError: Unknown head, a model without that branch, or an unsupported calibrator (one
            that reads the box's size cannot fold: the conv sees no box).
    """
    if head not in _BRANCHES:
        raise InputError(f"Expected argument `head` in {sorted(_BRANCHES)}, but got {head!r}")
    if calibrator.uses_size:
        raise InputError(
            f"cannot fold a {map_name(calibrator)} map into a model: it reads each box's size, "
            "which "
            "the class conv cannot see; deploy it with det_calib.attach"
        )
    model.float()
    det = model.model[-1]
    convs = _cls_convs(model, head)
    nc = int(det.nc)
    ab = affine_tensors(calibrator, nc)
    if ab is not None:
        a, b = ab
        with torch.no_grad():
            for conv in convs:  # a Conv2d's weight is (nc, c, 1, 1), a Linear's (nc, c)
                w = conv.weight.double() * a.view(-1, *[1] * (conv.weight.dim() - 1))
                bias = conv.bias.double() * a + b
                conv.weight.copy_(w.float())
                conv.bias.copy_(bias.float())
        return model
    maps = hinge_tensors(calibrator, nc)
    if maps is None:
        raise InputError(
            f"cannot fold a {map_name(calibrator)} map into a model: no affine or "
            "piecewise-linear form"
        )
    family = family_of(model)
    if family is not None:  # the family appends the map after its class layer
        family.append_map(model, head, maps, nc)
        return model
    branch = getattr(det, _BRANCHES[head])
    for i, level in enumerate(branch):
        layers = list(level) if isinstance(level, torch.nn.Sequential) else [level]
        branch[i] = torch.nn.Sequential(*layers, *hinge_layers(maps, nc)).float()
    return model


def _write_folded_checkpoint(
    source: str | Path,
    out: str | Path,
    calibrators: dict[str, LogitCalibrator],
    *,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write ``out``: ``source`` with one fitted calibrator per head folded in (float32, atomic).

    ``ckpt["det_calib"]`` holds ``{"calibrators": {head: calibrator.to_dict()}, "folded_into":
    {head: branch}, "source_checkpoint", "date", "previous": the source's det_calib dict or None,
    **metadata}``: plain JSON-like values, so the checkpoint loads without det_calib.

    Returns:
        ``out``.
    """
    source = Path(source)
    ckpt, model = _load_detection_checkpoint(source)
    for head, cal in calibrators.items():
        _fold_calibrator(model, head, cal)
    _save_checkpoint(
        ckpt,
        model,
        out,
        {
            "calibrators": {h: c.to_dict() for h, c in calibrators.items()},
            "folded_into": {h: _BRANCHES[h] for h in calibrators},
            "source_checkpoint": str(source.resolve()),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "previous": ckpt.get("det_calib"),
            **(metadata or {}),
        },
    )
    _log.info(
        "wrote calibrated checkpoint %s (%s)",
        out,
        "; ".join(
            f"{h}: {type(c).words(c.to_dict(), type(c).__name__)}" for h, c in calibrators.items()
        ),
    )
    return Path(out)


def write_run_checkpoint(
    source: str | Path,
    out: str | Path,
    records: dict[str, Any],
    *,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """``calibrated.pt`` of a run's calibrator records (head -> :class:`~det_calib.record.run_result.Calibrator`):
    the one place that chooses the writer. Temperatures only: :func:`write_calibrated_checkpoint`
    (``T`` folded into the last conv, the classic form); any other map:
    :func:`write_folded_checkpoint` (per channel when affine, else stock conv + ReLU hinge layers)."""

    if not records:
        raise InputError("no calibrator to fold into the checkpoint")
    if all(r.method == "temperature" for r in records.values()):
        return write_calibrated_checkpoint(
            source, out, {h: r.temperature for h, r in records.items()}, metadata=metadata
        )
    return _write_folded_checkpoint(
        source, out, {h: calibrator_of(r) for h, r in records.items()}, metadata=metadata
    )
