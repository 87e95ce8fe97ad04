"""Checks that need no forward pass, made before the first one.

A calibration run spends minutes capturing boxes; an input that can be seen to be wrong without
running the model must stop it before that, with one line naming the parameter or file at fault.
:func:`det_calib.pipeline.calibrate_job.calibrate` loads the model (which checks that it is a detector with the
requested heads), reads ``data.yaml`` and the two splits (every label file read once, every line
checked by :func:`det_calib.data.ground_truth.check_label_line`), compares the class names, and then calls
:func:`preflight`, which checks what is left:

- the options that :meth:`det_calib.job.settings.Settings.validate` does not cover, and the torch
  device (without touching the model);
- the output folder: not a file, creatable, writable, and with free disk for the outputs
  (:func:`_estimate_output_bytes`);
- the ground truth: at least one box in the fit split and one in the eval split.

Errors name parameters by their Python name in backquotes (`out`, `fit_split`) and carry them in
:attr:`det_calib.errors.InputError.params`; the CLI writes them as its flags.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from det_calib.data.ground_truth import Split
from det_calib.errors import InputError
from det_calib.job.settings import Settings

_log = logging.getLogger(__name__)

_OUTPUT_FILES = (
    "boxes.parquet",
    "calibrated.pt",
    "calibration.json",
    "summary.txt",
    "report.html",
    "report.md",
)
"""Files a run writes into the output folder (and a ``figures/`` folder with the report)."""

_BOX_ROW_BYTES = 32
"""Parquet bytes per row of ``boxes.parquet``, rounded up (21-24 measured on the demo runs)."""

_REPORT_HEAD_BYTES = 1 << 20
"""Report bytes per head: HTML with embedded figures, Markdown, PNGs, JSON (about 0.7 MB measured)."""

_REPORT_CLASS_BYTES = 20_000
"""Report bytes per class and head (per-class rows and figure panels)."""


@dataclass(frozen=True)
class Preflight:
    """What :func:`preflight` measured (the run goes on only when every check passed).

    Attributes:
        out_bytes: Estimated size of the outputs (:func:`_estimate_output_bytes`).
        free_bytes: Free disk where the output folder is (or will be created).
        gt_boxes: Ground-truth boxes (not crowd) per role, ``{"fit": n, "eval": n}``.
        skipped_images: Images left out of the fit and eval splits: unreadable, or with a
            malformed label file.
    """

    out_bytes: int
    free_bytes: int
    gt_boxes: dict[str, int]
    skipped_images: int


def preflight(
    *,
    model: str | Path,
    out: str | Path,
    fit: Split,
    ev: Split,
    heads: list[str],
    n_classes: int,
    settings: Settings,
) -> Preflight:
    """Check everything that needs no forward pass; raise on the first problem.

    Args:
        model: Detector checkpoint (its size sizes the calibrated checkpoint).
        out: Output folder.
        fit, ev: The fit and eval splits, as loaded (see :func:`det_calib.data.ground_truth.load_split`).
        heads: Heads to calibrate.
        n_classes: Number of classes.
        settings: The run's options.

    Returns:
        A :class:`Preflight` with the figures behind the checks.

    Raises:
        InputError: An option, the device, the output folder or a split's ground truth is not
            usable; the message names the parameter or file.
    """
    _check_options(settings)
    _check_fit_images(fit, settings)
    _check_device(settings.device)
    need = _estimate_output_bytes(
        model=model,
        n_images=len(fit.images) + len(ev.images),
        n_heads=len(heads),
        max_det=settings.max_det,
        n_classes=n_classes,
        report=settings.report,
    )
    free = _check_output_folder(out, need_bytes=need)
    gt = {"fit": _check_ground_truth(fit, role="fit"), "eval": _check_ground_truth(ev, role="eval")}
    skipped = len(set(fit.corrupt) | set(ev.corrupt))
    _log.info(
        "preflight: %d + %d images, %d + %d ground-truth boxes, %d image(s) skipped; outputs need "
        "about %s, %s free",
        len(fit.images),
        len(ev.images),
        gt["fit"],
        gt["eval"],
        skipped,
        _size(need),
        _size(free),
    )
    return Preflight(out_bytes=need, free_bytes=free, gt_boxes=gt, skipped_images=skipped)


def _check_fit_images(fit: Split, s: Settings) -> None:
    """``--method auto`` chooses by cross-validation over the fit split's images, in ``cv_folds``
    groups: fewer images than folds is refused before the capture, naming the options."""
    if s.method == "auto" and len(fit.images) < s.cv_folds:
        raise InputError(
            f"the fit split `{fit.name}` has {len(fit.images)} images, fewer than the "
            f"{s.cv_folds} folds of --method auto's cross-validation (`cv_folds`): fit on more "
            "images (`limit`), or name a method (`method` temperature)"
        )


def _check_options(s: Settings) -> None:
    """Options that :meth:`Settings.validate` leaves unchecked.

    Raises:
        InputError: ``imgsz`` not a positive integer, ``nms_iou`` outside (0, 1], ``seed`` or
            ``min_class_boxes`` negative.
    """
    if s.imgsz is not None and (not _is_int(s.imgsz) or s.imgsz < 1):
        raise InputError(
            f"Expected `imgsz` to be an integer larger than 0, but got {s.imgsz!r}", param="imgsz"
        )
    if not 0 < s.nms_iou <= 1:
        raise InputError(f"Expected `nms_iou` in (0, 1], but got {s.nms_iou}", param="nms_iou")
    for name in ("seed", "min_class_boxes"):
        v = getattr(s, name)
        if not _is_int(v) or v < 0:
            raise InputError(
                f"Expected `{name}` to be an integer of 0 or more, but got {v!r}", param=name
            )


def _check_device(device: str | None) -> None:
    """Check that a torch device exists, as Ultralytics will select it (no model is moved).

    Raises:
        InputError: Ultralytics refuses the device (e.g. ``0`` on a machine without CUDA).
    """
    if device is None:
        return
    from ultralytics.utils.torch_utils import select_device

    try:
        select_device(str(device), verbose=False)
    except ValueError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"`device` {device!r} is not available: {first}", param="device") from None


def _estimate_output_bytes(
    *,
    model: str | Path,
    n_images: int,
    n_heads: int,
    max_det: int,
    n_classes: int,
    report: bool = True,
) -> int:
    """Upper estimate of the bytes a run writes into its output folder.

    ``calibrated.pt`` is written in float32, so it is about twice a float16 checkpoint: 2 x the
    model file. ``boxes.parquet`` has at most ``max_det`` boxes per image and head, at
    :data:`_BOX_ROW_BYTES` each (the capture floor 0.001 fills ``max_det`` on many models). The
    report is :data:`_REPORT_HEAD_BYTES` per head plus :data:`_REPORT_CLASS_BYTES` per class and head.
    Old outputs are replaced only at the end, so they are not counted as free.

    Returns:
        Bytes.
    """
    model_bytes = Path(model).stat().st_size if Path(model).is_file() else 0
    boxes = n_images * n_heads * max_det * _BOX_ROW_BYTES
    rep = n_heads * (_REPORT_HEAD_BYTES + n_classes * _REPORT_CLASS_BYTES) if report else 0
    return int(2 * model_bytes + boxes + rep + 100_000)  # + calibration.json, summary.txt


def _check_output_folder(out: str | Path, *, need_bytes: int = 0) -> int:
    """Check that the output folder can be created and written, with ``need_bytes`` free.

    Nothing is created: the folder that would hold ``out`` is probed with a temporary file
    that is removed at once.

    Returns:
        Free bytes on the output folder's disk.

    Raises:
        InputError: ``out`` is a file or a broken link, lies under a file, is not writable, holds
            a folder where an output file goes, or its disk has less than ``need_bytes`` free.
    """
    out = Path(out)
    if out.is_symlink() and not out.exists():
        raise InputError(f"`out` is a broken symbolic link: {out}", param="out")
    if out.exists() and not out.is_dir():
        raise InputError(f"`out` is an existing file, not a folder: {out}", param="out")
    base = out
    while not base.exists() and not base.is_symlink():
        base = base.parent
    if not base.is_dir():
        raise InputError(f"`out` cannot be created: {base} is a file, not a folder", param="out")
    for name in _OUTPUT_FILES:
        if (out / name).is_dir():
            raise InputError(
                f"`out` holds a folder where the output file goes: {out / name}", param="out"
            )
    if (out / "figures").exists() and not (out / "figures").is_dir():
        raise InputError(
            f"`out` holds a file where the figures folder goes: {out / 'figures'}", param="out"
        )
    try:
        fd, probe = tempfile.mkstemp(prefix=".det_calib-probe-", dir=base)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise InputError(
            f"`out` is not writable: cannot create a file in {base} "
            f"({e.strerror or type(e).__name__})",
            param="out",
        ) from None
    free = shutil.disk_usage(base).free
    if free < need_bytes:
        raise InputError(
            f"not enough free disk for `out` ({out}): the outputs need up to {_size(need_bytes)}, "
            f"{base} has "
            f"{_size(free)} free; free some space, choose another `out`, or lower `max_det` or "
            "`limit`",
            param=("out", "max_det", "limit"),
        )
    return free


def _check_ground_truth(split: Split, *, role: Literal["fit", "eval"]) -> int:
    """Check that a split has ground-truth boxes (crowd annotations do not count).

    Without any, every captured box would count as incorrect: the fit has nothing to fit, the
    evaluation nothing to measure.

    Returns:
        The number of ground-truth boxes.

    Raises:
        InputError: The split has none; the message names the split and the parameter.
    """
    n = int((~split.gt["crowd"]).sum()) if split.gt.height else 0
    if n:
        return n
    param = f"{role}_split"
    why = (
        "its label files are empty or missing"
        if not split.gt.height
        else "all its annotations are crowd annotations"
    )
    if split.bad_labels:
        why += (
            f"; {len(split.bad_labels)} more image(s) were left out for a malformed label, "
            f"first {split.bad_labels[0]}"
        )
    raise InputError(
        f"the {role} split `{split.name}` has no ground-truth boxes in its {len(split.images)} "
        f"images ({why}): "
        f"every box would count as incorrect; add labels or choose another `{param}`",
        param=param,
    )


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _size(n: float) -> str:
    """Bytes in words: ``12.3 MB``."""
    if n < 1000:
        return f"{n:.0f} bytes"
    for unit in ("KB", "MB", "GB"):  # noqa: B007 (the unit the loop stops at is the one printed)
        n /= 1000
        if n < 1000:
            break
    return f"{n:.1f} {unit}"
