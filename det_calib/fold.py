"""Fold temperatures into a checkpoint that plain Ultralytics loads and runs.

The last layer of every ``cv3[i]`` (one-to-many branch) and ``one2one_cv3[i]`` (one-to-one
branch) of the ``Detect`` head is a plain ``Conv2d(c, nc, 1, bias=True)`` followed only by the
sigmoid, so dividing its weight and bias by T gives exactly ``sigmoid(z / T)``. Nothing custom is
needed at load time: the checkpoint holds a standard Ultralytics model (saved in float32, since
an fp16 save would round W/T) and a plain ``det_calib`` dict of metadata.
"""

from __future__ import annotations

import copy
import datetime as _dt
import logging
import math
from pathlib import Path
from typing import Any

import torch

from det_calib.errors import InputError, first_line
from det_calib.io import atomic_path

log = logging.getLogger(__name__)

BRANCHES = {"nms": "cv3", "e2e": "one2one_cv3"}
"""Head mode -> name of the classification branch of the Detect head."""


def _cls_convs(model: torch.nn.Module, head: str) -> list[torch.nn.Conv2d]:
    det = model.model[-1]
    branch = getattr(det, BRANCHES[head], None)
    if branch is None:
        raise InputError(f"the model has no {BRANCHES[head]} branch to fold the `{head}` temperature into")
    convs = []
    for level in branch:
        last = level[-1] if isinstance(level, torch.nn.Sequential) else level
        if not isinstance(last, torch.nn.Conv2d) or last.bias is None or last.kernel_size != (1, 1):
            raise InputError(
                f"unexpected classification layer {type(last).__name__} in {BRANCHES[head]}: "
                "expected a 1x1 Conv2d with bias"
            )
        if last.out_channels != det.nc:
            raise InputError(
                f"{BRANCHES[head]} ends in a conv with {last.out_channels} outputs, not one per class ({det.nc}): "
                "not a plain YOLO classification branch, a temperature cannot be folded into it"
            )
        convs.append(last)
    return convs


def fold_into_model(model: torch.nn.Module, temperatures: dict[str, float]) -> torch.nn.Module:
    """Divide the last classification conv of each calibrated branch by its temperature, in place.

    Args:
        model: An Ultralytics ``DetectionModel`` (unfused: both branches present where they exist).
        temperatures: Head mode (``"nms"``, ``"e2e"``) -> T > 0.

    Returns:
        ``model``, in float32.
    """
    model.float()
    for head, t in temperatures.items():
        if head not in BRANCHES:
            raise InputError(f"Expected head names in {sorted(BRANCHES)}, but got {head!r}")
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t > 0):
            raise InputError(f"temperature for head `{head}` must be a finite positive number, got {t}")
        with torch.no_grad():
            for conv in _cls_convs(model, head):
                conv.weight.div_(t)
                conv.bias.div_(t)
    return model


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
    if task != "detect" or not hasattr(model.model[-1], "cv3"):
        raise InputError(f"{source} is not a detection model (task `{task}`)")
    fold_into_model(model, temperatures)
    previous = ckpt.get("det_calib") or {}
    total = dict(previous.get("temperature", {}))
    for head, t in temperatures.items():
        total[head] = total.get(head, 1.0) * float(t)
    new = {k: v for k, v in ckpt.items() if k not in ("optimizer", "ema", "updates", "model", "det_calib")}
    new["model"] = model
    new["ema"] = None
    new["optimizer"] = None
    new["det_calib"] = {
        "temperature": total,
        "folded_into": {h: BRANCHES[h] for h in total},
        "source_checkpoint": str(source.resolve()),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **(metadata or {}),
    }
    with atomic_path(out) as tmp:
        torch.save(new, tmp)
    log.info("wrote calibrated checkpoint %s (T=%s)", out, total)
    return Path(out)


def read_calibration_metadata(path: str | Path) -> dict[str, Any] | None:
    """The ``det_calib`` dict of a calibrated checkpoint, or None for an uncalibrated one."""
    ckpt = torch.load(Path(path), map_location="cpu", weights_only=False)
    return ckpt.get("det_calib") if isinstance(ckpt, dict) else None


def temperatures_from_json(path: str | Path) -> dict[str, float]:
    """The per-head temperatures of a ``calibration.json`` (read by :func:`det_calib.results.read_calibrators`).

    Raises:
        InputError: The file is missing or damaged, has no temperature, or a head's calibrator is
            not a temperature (only a temperature folds into the checkpoint).
    """
    from det_calib.results import read_calibrators

    path = Path(path)
    calibrators = read_calibrators(path)
    if not calibrators:
        raise InputError(f"{path} has no `temperature` mapping (head -> T)")
    out = {}
    for head, c in calibrators.items():
        if c.temperature is None:
            raise InputError(f"{path}: the `{head}` calibrator is `{c.method}`, not a temperature: it cannot be folded")
        out[head] = c.temperature
    return out
