"""The run's summary lines of the kept-set sampling floors (det_calib/report/text_summary.py), on the pinned
fixture run's record (tests/data/fixture_calibration.json), which holds both floors of every kept set."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from det_calib.record.run_result import RunResult
from det_calib.report.common import engine_label
from det_calib.report.text_summary import _MAP_SOURCES_LINE, summary_text

pytestmark = pytest.mark.fast

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "fixture_calibration.json"


@pytest.fixture()
def ref() -> dict:
    return json.loads(REFERENCE.read_text())


def _without_laece_floor(d: dict) -> dict:
    """The record as a run written before the LaECE_0 floor: its keys absent everywhere."""
    if isinstance(d, dict):
        return {k: _without_laece_floor(v) for k, v in d.items() if not k.startswith("laece_floor")}
    if isinstance(d, list):
        return [_without_laece_floor(v) for v in d]
    return d


def test_laece_floor_lines_follow_the_figures_order(ref):
    r = RunResult.from_dict(ref)
    lines = summary_text(r, timings=False).splitlines()
    for head in r.heads:
        o1 = r.head(head).eval.operating_after[0]
        lo, hi = o1.laece_floor_range
        want = (
            f"[{head}]   a perfectly calibrated detector would score LaECE_0 {o1.laece_floor:.4f} "
            f"[{lo:.4f}, {hi:.4f}] on these {o1.boxes} boxes (sampling floor, 95% range)"
            + ("; the calibrated LaECE_0 is at that floor" if o1.laece0 <= hi else "")
        )
        i = lines.index(want)
        # the default target: ECE first on the kept-set line, so its floor line first too
        assert lines[i - 1].startswith(
            f"[{head}]   a perfectly calibrated detector would score ECE "
        )
        assert lines[i - 2].startswith(f"[{head}] boxes kept at conf 0.25")
    assert lines[-2].startswith(
        "(LaECE_0's sampling floor: each kept box's IoU target drawn 200 times"
    )
    assert lines[-1] == f"({_MAP_SOURCES_LINE})"  # the run has Ultralytics val figures
    # --target iou: LaECE_0 first on the kept-set line, and its floor line first
    iou = copy.deepcopy(ref)
    iou["target"] = "iou"
    lines = summary_text(RunResult.from_dict(iou), timings=False).splitlines()
    for head in r.heads:
        i = next(
            k
            for k, ln in enumerate(lines)
            if ln.startswith(f"[{head}]   a perfectly calibrated detector would score LaECE_0 ")
        )
        assert (
            lines[i - 1].startswith(f"[{head}] boxes kept at conf 0.25")
            and "(the target)" in lines[i - 1]
        )
        assert lines[i + 1].startswith(
            f"[{head}]   a perfectly calibrated detector would score ECE "
        )


def test_at_floor_words_and_runs_without_the_floor(ref):
    d = copy.deepcopy(ref)
    o = d["eval"]["nms"]["operating_after"][0]
    o["laece0"], o["laece_floor_range"] = 0.2, [0.15, 0.25]
    o2 = d["eval"]["e2e"]["operating_after"][0]
    o2["laece0"], o2["laece_floor_range"] = 0.3, [0.15, 0.25]
    text = summary_text(RunResult.from_dict(d), timings=False)
    assert "[0.1500, 0.2500] on these" in text
    nms, e2e = (
        [
            ln
            for ln in text.splitlines()
            if ln.startswith(f"[{h}]   a perfectly calibrated detector would score LaECE_0")
        ]
        for h in ("nms", "e2e")
    )
    assert nms[0].endswith("; the calibrated LaECE_0 is at that floor")
    assert e2e[0].endswith("(sampling floor, 95% range)")
    # a run written before the floor prints the same summary without the new lines
    new = summary_text(RunResult.from_dict(ref), timings=False).splitlines()
    old = summary_text(RunResult.from_dict(_without_laece_floor(ref)), timings=False).splitlines()
    added = (
        "[nms]   a perfectly calibrated detector would score LaECE_0 ",
        "[e2e]   a perfectly calibrated detector would score LaECE_0 ",
        "(LaECE_0's sampling floor",
    )
    assert old == [ln for ln in new if not ln.startswith(added)]
    assert len(new) == len(old) + 3  # one line per head and the legend


def test_each_map_says_what_it_is_and_their_difference_is_explained_once(ref):
    """A head's two mAP50-95: the COCO one of det_calib's captured boxes, and Ultralytics val's own pass;
    the note on why they differ once, and only in a run where val ran."""
    r = RunResult.from_dict(ref)
    lines = summary_text(r, timings=False).splitlines()
    for head in r.heads:
        e, uv = r.head(head).eval, r.head(head).ultralytics_val
        (coco,) = [ln for ln in lines if ln.startswith(f"[{head}] COCO mAP50-95 ")]
        assert coco.startswith(
            f"[{head}] COCO mAP50-95 {e.map50_95_before:.4f} -> {e.map50_95_after:.4f}, "
        )
        assert coco.endswith(
            f"; the boxes det_calib captured, scored by {engine_label(e.map_engine)})"
        )
        (val,) = [ln for ln in lines if ln.startswith(f"[{head}] Ultralytics val mAP50-95 ")]
        assert val.startswith(
            f"[{head}] Ultralytics val mAP50-95 original {uv.original.map50_95:.4f}, "
        )
        assert val.endswith(" (Ultralytics' own val pass and mAP code)")
    assert lines.count(f"({_MAP_SOURCES_LINE})") == 1
    no_val = copy.deepcopy(ref)
    del no_val["ultralytics_val"]  # a --no-val run
    lines = summary_text(RunResult.from_dict(no_val), timings=False).splitlines()
    assert (
        not [ln for ln in lines if "Ultralytics val" in ln]
        and f"({_MAP_SOURCES_LINE})" not in lines
    )


def test_engine_label():
    assert engine_label("det_calib") == "det_calib's COCO engine (pycocotools' figures)"
    assert (
        engine_label("pycocotools") == engine_label(None) == "pycocotools"
    )  # None: a run from before the choice
