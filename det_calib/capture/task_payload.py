"""The task payload of a pose or OBB model's kept boxes, as Ultralytics' own predictors build it.

After NMS (or the one-to-one head's top-k) a kept row of a pose or OBB model is
``[box, conf, cls, extra...]``: the box is ``xyxy`` for pose and ``xywh`` for OBB (its NMS is
rotated, ProbIoU on ``xywhr``), the extra channels hold 3K decoded keypoints (``kpt_shape [K, 3]``)
or the angle. These functions turn such rows into what ``predict`` returns, with Ultralytics'
own scaling:

- :func:`pose_boxes`: ``PosePredictor.construct_result``: the box scaled (and clipped) as a
  detector's, the keypoints ``pred[:, 6:].view(n, *kpt_shape)`` through ``ops.scale_coords``
  (clipped to the image): ``Results.boxes.xyxy`` and ``Results.keypoints.data``.
- :func:`obb_boxes`: ``OBBPredictor.construct_result``: ``xywh`` and the angle, the centre and
  sides through ``ops.scale_boxes(..., xywh=True)`` (not clipped), put in Ultralytics' ``OBB``
  results class: ``Results.obb.xywhr`` and its axis-aligned hull ``Results.obb.xyxy``.

``nms_task_args`` gives the NMS arguments ``DetectionPredictor.postprocess`` passes for a task.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["CAPTURE_TASKS", "nms_task_args", "obb_boxes", "pose_boxes", "result_boxes_attr", "task_kpt_shape"]

CAPTURE_TASKS = ("detect", "segment", "pose", "obb")
"""The Ultralytics tasks whose boxes det_calib captures (every task that scores boxes with the
detection head's class branch). The calibration run accepts fewer (``predictor.TASKS``)."""


def nms_task_args(task: str, nc: int) -> dict:
    """NMS keywords as ``DetectionPredictor.postprocess`` sets them for ``task``: ``nc`` names the
    class channels for every task but ``detect`` (the extra channels ride along as ``det[:, 6:]``),
    and OBB's NMS is rotated.

    >>> nms_task_args("detect", 3), nms_task_args("obb", 3)
    ({'nc': 0, 'rotated': False}, {'nc': 3, 'rotated': True})
    """
    return {"nc": 0 if task == "detect" else int(nc), "rotated": task == "obb"}


def task_kpt_shape(head: torch.nn.Module, task: str) -> tuple[int, int] | None:
    """The pose head's ``kpt_shape`` ``(K, ndim)`` for a pose model, else None."""
    return (int(head.kpt_shape[0]), int(head.kpt_shape[1])) if task == "pose" else None


def pose_boxes(det: torch.Tensor, lb_shape, im_shape: tuple[int, int],
               kpt_shape: tuple[int, int]) -> tuple[torch.Tensor, np.ndarray]:
    """Kept pose rows ``det`` (n, 6 + K x ndim) of a letterboxed image of shape ``lb_shape`` ->
    ``(xyxy, keypoints)`` in the image of shape ``im_shape`` (h, w), as ``predict`` returns them.

    ``det`` is scaled in place, as the predictor scales its rows. Keypoints: (n, K, ndim) float32.
    """
    from ultralytics.utils import ops

    xyxy = ops.scale_boxes(lb_shape, det[:, :4], im_shape)
    kpts = det[:, 6:].view(det.shape[0], *kpt_shape)
    kpts = ops.scale_coords(lb_shape, kpts, im_shape)
    return xyxy, kpts.cpu().numpy().astype(np.float32, copy=False)


def obb_boxes(det: torch.Tensor, lb_shape, im_shape: tuple[int, int]) -> tuple[torch.Tensor, np.ndarray]:
    """Kept OBB rows ``det`` (n, 7: ``x y w h conf cls angle``) of a letterboxed image of shape
    ``lb_shape`` -> ``(xyxy, xywhr)`` in the image of shape ``im_shape`` (h, w): the axis-aligned
    hull ``Results.obb.xyxy`` and the rotated box ``Results.obb.xywhr`` (n, 5) float32."""
    from ultralytics.engine.results import OBB
    from ultralytics.utils import ops

    rboxes = torch.cat([det[:, :4], det[:, -1:]], dim=-1)
    rboxes[:, :4] = ops.scale_boxes(lb_shape, rboxes[:, :4], im_shape, xywh=True)
    obb = OBB(torch.cat([rboxes, det[:, 4:6]], dim=-1), tuple(im_shape))
    return obb.xyxy, obb.xywhr.cpu().numpy().astype(np.float32, copy=False)


def result_boxes_attr(result) -> str:
    """Where an Ultralytics ``Results`` keeps its scored boxes: ``obb`` for an OBB model's (rotated boxes,
    ``Results.boxes`` is None), else ``boxes`` (a detector's, a segment or pose model's)."""
    return "obb" if getattr(result, "obb", None) is not None else "boxes"
