"""Fold a classifier's map into its last linear layer: a checkpoint plain Ultralytics runs calibrated.

A classify model's logits are ``z = A h + c`` (``Classify.linear``); a map ``z -> W z + b``
(:class:`~det_calib.tasks.classify.softmax_maps.MultiClassMap`: temperature, vector or matrix scaling)
folds into that layer exactly as ``A' = W A`` and ``c' = W c + b``, in float32 (half precision
would round ``A / T``). Plain Ultralytics loads the written checkpoint and its ``Results.probs``
are the calibrated probabilities; the map's parameters ride along in ``ckpt["det_calib"]`` as
plain JSON values, so the file loads without det_calib.
"""

from __future__ import annotations

import copy
import datetime as _dt
from pathlib import Path
from typing import Any

from det_calib.errors import InputError
from det_calib.io import atomic_path
from det_calib.tasks import answers_per_image
from det_calib.tasks.classify.softmax_maps import MultiClassMap

__all__ = ["write_classify_checkpoint"]


def _head_linear(model: Any):
    head = model.model[-1]
    linear = getattr(head, "linear", None)
    if linear is None or not hasattr(linear, "weight"):
        raise InputError(
            "this model's last layer is not Ultralytics' Classify head (no `linear` layer)"
        )
    return linear


def _fold_classifier(model: Any, mapping: MultiClassMap) -> Any:
    """Fold ``mapping`` into ``model``'s ``Classify.linear`` in place (the model in float32)."""
    import torch

    model.float()
    linear = _head_linear(model)
    k = linear.weight.shape[0]
    if mapping.weight.shape != (k, k):
        raise InputError(f"the map is for {mapping.weight.shape[0]} classes, the model has {k}")
    with torch.no_grad():
        w = torch.as_tensor(mapping.weight, dtype=torch.float64)
        b = torch.as_tensor(mapping.bias, dtype=torch.float64)
        a = linear.weight.double()
        c = linear.bias.double() if linear.bias is not None else torch.zeros(k, dtype=torch.float64)
        linear.weight.copy_((w @ a).float())
        if linear.bias is None:
            linear.bias = torch.nn.Parameter(torch.zeros(k))
        linear.bias.copy_((w @ c + b).float())
    return model


def write_classify_checkpoint(
    source: str | Path,
    out: str | Path,
    mapping: MultiClassMap,
    *,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write ``out``: the classify checkpoint ``source`` with ``mapping`` folded in, atomically.

    Raises:
        InputError: ``source`` is missing, not an Ultralytics checkpoint, or not a classify model.
    """
    import torch

    source = Path(source)
    if not source.is_file():
        raise InputError(f"model file not found: {source}")
    try:
        ckpt = torch.load(source, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unreadable file is the user's input
        raise InputError(f"cannot load checkpoint {source}: {str(e).splitlines()[0]}") from None
    if not isinstance(ckpt, dict) or (ckpt.get("model") is None and ckpt.get("ema") is None):
        raise InputError(f"{source} is not an Ultralytics checkpoint (no `model` entry)")
    model = copy.deepcopy(ckpt.get("ema") or ckpt["model"])
    task = getattr(model, "task", None) or (ckpt.get("train_args") or {}).get("task", "detect")
    if not answers_per_image(task):
        raise InputError(f"{source} is a `{task}` model, not a classify model")
    _fold_classifier(model, mapping)
    previous = ckpt.get("det_calib") or {}
    record = {
        "classifier_map": mapping.to_dict(),
        "previous": previous or None,
        "folded_into": "Classify.linear",
        "source_checkpoint": str(source.absolute()),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **(metadata or {}),
    }
    new = {
        k: v
        for k, v in ckpt.items()
        if k not in ("optimizer", "ema", "updates", "model", "det_calib")
    }
    new.update(model=model, ema=None, optimizer=None, det_calib=record)
    with atomic_path(out) as tmp:
        torch.save(new, tmp)
    return Path(out)
