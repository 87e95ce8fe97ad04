"""The detect task: boxes alone (every hook is :class:`~det_calib.tasks.contract.Task`'s), its class channels
the only channels after the box (NMS with ``nc=0``)."""

from __future__ import annotations

from det_calib.tasks.contract import Task

__all__ = ["Detect"]


class Detect(Task):
    """An Ultralytics detector: no payload, box labels, box IoU."""

    name = "detect"
    records_rule = False

    def nms_args(self, nc: int) -> dict:
        return {"nc": 0, "rotated": False}
