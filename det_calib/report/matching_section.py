"""The Matching section of a run that records its matching rule (a segment, pose or OBB model's run): which
overlap made a box correct (box IoU, or the task's own: mask IoU, OKS, rotated IoU), in words, and a picture
of a few eval images with their matched and unmatched boxes, drawn by the task.

Written for runs that record a matching rule (``calibration.json``'s ``matching``); a detector's report has
no such section. The task's own words and picture are its ``report_panel`` part
(``det_calib/tasks/<task>/report_panel.py``, reached through :meth:`~det_calib.tasks.contract.Task.part`):
``WORDS(rule, iou)`` the rule in words, ``BOX_NOTE`` what a run matched by box IoU leaves out, and
``PICTURE(page, ctx, rule, head, conf)`` the picture (the task's payload column in ``boxes.parquet`` says
which task drew the run's boxes).
"""

from __future__ import annotations

import logging
from types import ModuleType

from det_calib.data.matching_rule import MatchingRule
from det_calib.tasks import TASKS

from .context import ReportContext
from .document import Heading, Para
from .page import Page
from .task_examples import MAX_IMAGES, example_images

_log = logging.getLogger(__name__)

__all__ = ["MAX_IMAGES", "example_images", "matching_section"]


def _panel_parts() -> list[tuple[object, ModuleType]]:
    """(task, its ``report_panel`` part) of each registered task that has one."""
    return [(t, p) for t in TASKS.values() if (p := t.part("report_panel")) is not None]


def _matching_words(rule: MatchingRule, iou: float) -> str:
    """The matching rule of a run in words (the section's first paragraph)."""
    parts = _panel_parts()
    own = next((p for t, p in parts if t.rule == rule.by and rule.by != "box"), None)
    if own is not None:
        return own.WORDS(rule, iou)
    # the reason names the task (its words), or is the task's reason for --match box
    note = next(
        (p.BOX_NOTE for t, p in parts if t.words in rule.reason or t.box_reason == rule.reason),
        "the payload of the model's boxes is not compared",
    )
    return (
        "A box counts as correct when its box overlaps a ground-truth box of the same class with "
        "IoU >= "
        f"{iou:g}, each ground truth taken at most once, boxes in descending conf (COCO's `bbox` "
        "protocol); "
        f"{note}. Why box IoU: {rule.reason} (--match {rule.option})."
    )


def matching_section(page: Page, ctx: ReportContext) -> None:
    """The Matching section: the rule in words; the picture of a few eval images (the first head's boxes
    kept at the lowest --conf by the deployed scores), drawn by the task whose payload the run's boxes carry."""
    rule = ctx.run.result.matching
    if rule is None:
        return
    page.add(
        Heading(2, "Matching", "matching"), Para(_matching_words(rule, ctx.run.settings.iou_match))
    )
    s = ctx.subjects[0]
    conf = s.low if s.low is not None else 0.25
    columns = ctx.run.boxes.columns
    for task, own in _panel_parts():
        if task.payload in columns:
            own.PICTURE(page, ctx, rule, s.head, conf)
            return
