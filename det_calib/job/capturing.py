"""What every job does before its figures: import what the first image needs, and capture the splits
(one forward pass per image serves every head; an export through its own capturer). Shared by
``calibrate``, ``ensemble`` and ``check``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import polars as pl

from det_calib.data.ground_truth import Split
from det_calib.data.segments import has_masks
from det_calib.errors import InputError
from det_calib.job import clock
from det_calib.job.inputs import Inputs
from det_calib.job.settings import Settings

log = logging.getLogger(__name__)

__all__ = ["capture_split", "capture_splits", "freeze_startup_objects", "open_capturer", "startup_imports"]


def startup_imports() -> None:
    """Import what the first image needs (torch, Ultralytics, the capture), charged to ``imports``."""
    with clock.stage("imports"):
        import ultralytics  # noqa: F401

        import det_calib.capture.predictor  # noqa: F401
    if clock.since_process():
        freeze_startup_objects()


def freeze_startup_objects() -> None:
    """In the command line's own process: move every object made so far (the modules, classes and
    functions of torch, Ultralytics, polars and numpy, which live until the exit) out of the cyclic
    garbage collector's reach. Each full collection of the run then walks only the objects the run
    itself makes: about a second of CPU fewer on the demo. Objects are still freed by reference
    counting; nothing else changes. A library call leaves its caller's collector as it is."""
    import gc

    gc.freeze()


def capture_splits(inputs: Inputs, splits: Sequence[Split], s: Settings) -> dict[str, list[pl.DataFrame]]:
    """Boxes and raw logits of every head on each split: one forward pass per image serves all heads.

    Returns:
        Head -> one capture table per split (in the order of ``splits``).
    """
    cap = open_capturer(inputs, s)
    out: dict[str, list[pl.DataFrame]] = {h: [] for h in inputs.heads}
    for sp in splits:
        for h, rows in capture_split(cap, inputs, sp, s).items():
            out[h].append(rows)
    return out


def open_capturer(inputs: Inputs, s: Settings) -> Any:
    """The capture's own copy of the detector (charged to ``model load``): a Capturer, or an
    ExportCapturer for an export."""
    from det_calib.capture.exported import make_capturer

    with clock.stage("model load"):
        return make_capturer(inputs.yolo, s.capture_options(heads=inputs.heads, imgsz=inputs.imgsz))


def capture_split(cap: Any, inputs: Inputs, sp: Split, s: Settings) -> dict[str, pl.DataFrame]:
    """Head -> the capture table of one split (one forward pass per image for every head)."""
    log.info("capturing %s boxes on `%s` (%d images)", "+".join(inputs.heads), sp.name, len(sp.images))
    if hasattr(cap, "masks"):  # a segment model's masks only where a figure reads them: ground-truth masks
        cap.masks = has_masks(sp)
    raw = cap(sp.images, split=sp.name, image_names=sp.image_names(), progress=s.progress)
    return {h: _head_rows(raw, h, sp, s) for h in inputs.heads}


def _head_rows(raw: pl.DataFrame, head: str, sp: Split, s: Settings) -> pl.DataFrame:
    rows = raw.filter(pl.col("head") == head)
    if rows.height == 0:
        raise InputError(
            f"no boxes captured on split `{sp.name}` with the {head} head above conf {s.conf_floor}: "
            "is this the right model for this data?"
        )
    return rows
