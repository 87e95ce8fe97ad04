"""Where an Ultralytics export's output holds the class scores, and the task's channels after them.

Every task that scores boxes (detect, segment, pose, obb) exports the detection head's class probabilities in
the same place: per-anchor outputs ``(B, 4 + nc + extra, anchors)`` at channels ``4 .. 4 + nc``, row outputs
``(B, max_det, 6 + extra)`` (top-k, or NMS in the graph) in column 4 with the class in column 5. What follows
is the task's: a segment model's mask coefficients (its prototype masks are a second output), a pose model's
keypoints, an OBB model's angle. :func:`score_layout` gives these positions for an export, and
:func:`check_output_layout` refuses in one line an export whose outputs do not have them (the calibrated export
would map the wrong channels). :func:`score_step` tells an output whose scores are quantised (an INT8 output)
by the scores captured from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from det_calib.calibrators import registry
from det_calib.errors import InputError
from det_calib.tasks import get_task

if TYPE_CHECKING:  # pragma: no cover
    from det_calib.calibrators.base import LogitCalibrator
    from det_calib.capture.exported import ExportInfo


@dataclass(frozen=True)
class ScoreLayout:
    """Where an export's first output holds what, along its channel ``axis``.

    Per-anchor outputs ``(B, 4 + nc + extra, anchors)`` (axis 1): the 4 box channels (``x y w h``), the nc
    class probabilities at ``scores = (4, 4 + nc)``, then the task's extra channels from ``4 + nc``: a segment
    model's mask coefficients, a pose model's K keypoints (``x y`` or ``x y visibility``, keypoint by keypoint),
    an OBB model's angle (radians). Row outputs ``(B, max_det, 6 + extra)`` (axis -1): ``x1 y1 x2 y2`` (OBB:
    ``x y w h``), the kept class's probability at ``scores = (4, 5)``, its class at 5, the extras from 6.

    Attributes:
        axis: The channel axis (1, or -1 for rows).
        scores: ``[start, stop)`` of the class probabilities.
        extra: First extra channel; ``extra_size`` channels follow it (None where unknown: a segment model's
            coefficient count is not in the metadata).
    """

    axis: int
    scores: tuple[int, int]
    extra: int
    extra_size: int | None

    @property
    def channels(self) -> int | None:
        """The output's channel count the layout implies (None where unknown)."""
        return None if self.extra_size is None else self.extra + self.extra_size


def score_layout(info: ExportInfo) -> ScoreLayout:
    """The :class:`ScoreLayout` of an export of ``info.task``.

    >>> from pathlib import Path
    >>> from det_calib.capture.exported import ExportInfo
    >>> pose = ExportInfo(Path("p.onnx"), "onnx", "nms", False, (320, 320), list("abc"), "fp32", False, 1, "pose",
    ...                   (5, 3))
    >>> score_layout(pose)
    ScoreLayout(axis=1, scores=(4, 7), extra=7, extra_size=15)
    >>> import dataclasses
    >>> score_layout(dataclasses.replace(pose, task="obb", payload_shape=None, head="e2e", rows=True))
    ScoreLayout(axis=-1, scores=(4, 5), extra=6, extra_size=1)
    """
    nc = len(info.names)
    size = get_task(info.task).export_channels(info.payload_shape)
    if info.rows:
        return ScoreLayout(-1, (4, 5), 6, size)
    return ScoreLayout(1, (4, 4 + nc), 4 + nc, size)


def _expected_outputs(info: ExportInfo) -> int:
    """The outputs of an Ultralytics export of ``info.task``: one for a detector, a pose or an OBB model; two for
    a segment model (``output0``: 4 box channels, the class scores, 32 mask coefficients, or rows
    ``x1 y1 x2 y2 conf cls`` and the coefficients; ``output1``: the mask prototypes, left as they are)."""
    return get_task(info.task).export_outputs


def check_output_layout(info: ExportInfo, n_outputs: int, channels: int | None) -> None:
    """One line when an export has not the outputs of its task (:func:`_expected_outputs`) or its first output's
    channel count (``channels``; None where not static) is not what :func:`score_layout` says.

    Raises:
        InputError: Either mismatch.
    """
    if n_outputs != _expected_outputs(info):
        raise InputError(
            f"{info.path}: expected {get_task(info.task).outputs_words}, found {n_outputs} outputs"
        )
    want = score_layout(info).channels
    if channels and want is not None and int(channels) != want:
        raise InputError(
            f"{info.path}: a {info.task} export with {len(info.names)} classes"
            + (f" and kpt_shape {list(info.payload_shape)}" if info.payload_shape else "")
            + f" outputs {want} values per {'row' if info.rows else 'anchor'}, found {channels}: "
            "not a layout det_calib knows where the class scores sit in"
        )


def score_step(conf: Any) -> float | None:
    """The step of quantised engine scores: the smallest gap between distinct scores when every score is a
    whole multiple of it (within 1e-3 of a step), else None (float scores).

    An INT8 output (LiteRT INT8: the last tensor is int8, dequantised as ``(q - zero_point) * scale``) gives
    scores ``k * scale`` for whole ``k >= 0``, so boxes tie and the logit takes one value per level.

    >>> score_step(np.float32([0.25, 0.5, 0.75, 0.5])), score_step(np.float32([0.2501, 0.5, 0.7512]))
    (0.25, None)
    """
    u = np.unique(np.asarray(conf, dtype=np.float64))
    u = u[u > 0]
    if u.size < 3:
        return None
    step = float(np.diff(u).min())
    if step < 1e-4:
        return None
    k = u / step
    return step if bool(np.all(np.abs(k - np.round(k)) < 1e-3)) else None


def map_name(calibrator: LogitCalibrator) -> str:
    """The ``--method`` name of a calibrator (messages name the map, not its class), else its class's."""
    cls = type(calibrator)
    return next((m for m in registry.methods() if registry.method_spec(m).cls is cls), cls.__name__)
