"""Model families of the detect task as plug-ins: a family is a kind of detector whose head is not a YOLO
``Detect`` head (RT-DETR's ``RTDETRDecoder``), registered here by the class name of the loaded model's last
layer. A YOLO detect head (YOLOv5u to YOLO26, and the segment, pose and OBB heads built on it) is the built-in
path and has no family: :func:`family_of` returns None for it.

A family is one module (a :class:`Family` subclass, its instance the module's ``FAMILY``) and one
line in :data:`_BUILTIN`; the registry registers a built-in module's ``FAMILY`` when it imports it;
the stages ask
:func:`family_of` once and call the family's hooks: its head modes (``heads``), its capture (``capturer``),
where its class scores are made (``score_layers``, the layers an affine map folds into, and ``append_map``, how
a piecewise-linear map is appended after them), and its Ultralytics validator (``validator``).

>>> family_of(None) is None
True
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

__all__ = ["Family", "family_of", "family_with_head"]

_BUILTIN: dict[str, str] = {"RTDETRDecoder": "det_calib.families.rtdetr"}
"""The families det_calib ships: head class name -> the module that declares its family (its
``FAMILY``), imported on the first lookup of a model with that head (a YOLO model's capture imports
no family module)."""

_FAMILIES: dict[str, Family] = {}
"""Head class name (the loaded model's last layer, ``type(model.model[-1]).__name__``) -> the family."""

_loaded: set[str] = set()


class Family:
    """The contract of a model family of the detect task. Every hook takes the loaded model's objects (an
    Ultralytics model wrapper, its ``DetectionModel`` or a checkpoint's model), never a path."""

    name: ClassVar[str] = ""
    """The family's name in messages and docs (``rtdetr``)."""
    head_classes: ClassVar[tuple[str, ...]] = ()
    """The class names of the heads it captures (the last layer of the model)."""
    heads: ClassVar[tuple[str, ...]] = ()
    """Its head modes, words of the box table's ``head`` column (:data:`det_calib.data.box_table.HEADS`)."""
    val_words: ClassVar[str] = (
        "the original's figures come from a stock Ultralytics val of the original "
        "checkpoint with the family's own validator, the calibrated checkpoint's from another"
    )
    """How the run's notes say the original's val figures were obtained (one stock val of each checkpoint)."""

    def capturer(self, yolo: Any, options: Any, /, **kw: Any) -> Any:
        """A capturer of the loaded model ``yolo``: called as ``cap(images, split=..., image_names=...,
        image_ids=..., progress=...)`` it returns the capture table; it has ``heads``, ``imgsz`` and ``settings``."""
        raise NotImplementedError

    def score_layers(self, model: Any, head: str) -> list:
        """The layers whose output channels are the class logits of ``head`` (an affine map scales their weight
        and bias per output channel)."""
        raise NotImplementedError

    def append_map(self, model: Any, head: str, maps: list, nc: int) -> None:
        """Append stock layers computing ``maps[c]`` on each class logit after :meth:`score_layers`, in place."""
        raise NotImplementedError

    def validator(self) -> type:
        """Ultralytics' validator class of the family (its val of a checkpoint)."""
        raise NotImplementedError

    def predictor_class(self) -> type:
        """Ultralytics' predictor class of the family (what runs its exports: their rows are its boxes)."""
        raise NotImplementedError


def _register(family: Family) -> None:
    """Add ``family`` under each of its head class names (replacing one of the same name)."""
    for name in family.head_classes:
        _FAMILIES[name] = family


def _head_class(model: Any) -> str:
    """The class name of the last layer of ``model`` (an Ultralytics model wrapper, a ``DetectionModel`` or
    the head itself); ``""`` when it has none."""
    import torch

    obj = model
    for _ in range(3):  # the wrapper's DetectionModel, its Sequential of layers
        if isinstance(obj, torch.nn.Sequential):
            return type(obj[-1]).__name__ if len(obj) else ""
        obj = getattr(obj, "model", None)
    return type(model).__name__ if isinstance(model, torch.nn.Module) else ""


def family_of(model: Any) -> Family | None:
    """The registered family of ``model``'s head, or None (a YOLO detect head, the built-in path). ``model``
    may be the head's class name (an export's metadata records it as ``head``)."""
    if model is None:
        return None
    name = model if isinstance(model, str) else _head_class(model)
    _load(_BUILTIN.get(name))
    return _FAMILIES.get(name)


def _load(module: str | None) -> None:
    """Import a built-in family's module once and register the family it declares (``FAMILY``)."""
    if module is not None and module not in _loaded:
        _register(importlib.import_module(module).FAMILY)
        _loaded.add(module)


def family_with_head(head: str) -> Family | None:
    """The registered family whose head modes include ``head`` (``detr``: RT-DETR), or None (``nms``, ``e2e``:
    the YOLO detect heads)."""
    for module in _BUILTIN.values():  # every built-in family registered
        _load(module)
    return next((f for f in _FAMILIES.values() if head in f.heads), None)
