"""Where an export's output holds the class scores: known answers per task and output form, and the one-line
refusal of an export whose outputs are not its task's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from det_calib.capture.exported import ExportInfo
from det_calib.deploy.export_layout import (
    ScoreLayout,
    _expected_outputs,
    check_output_layout,
    score_layout,
)
from det_calib.errors import InputError

pytestmark = pytest.mark.fast

DETECT = ExportInfo(
    Path("m.onnx"), "onnx", "nms", False, (320, 320), [str(k) for k in range(8)], "fp32", False, 1
)


@pytest.mark.parametrize(
    "task, kpt_shape, rows, want",
    [
        ("detect", None, False, ScoreLayout(1, (4, 12), 12, 0)),
        ("detect", None, True, ScoreLayout(-1, (4, 5), 6, 0)),
        ("segment", None, False, ScoreLayout(1, (4, 12), 12, None)),
        ("pose", (5, 3), False, ScoreLayout(1, (4, 12), 12, 15)),
        ("pose", (17, 2), True, ScoreLayout(-1, (4, 5), 6, 34)),
        ("obb", None, False, ScoreLayout(1, (4, 12), 12, 1)),
        ("obb", None, True, ScoreLayout(-1, (4, 5), 6, 1)),
    ],
)
def test_score_layout(task, kpt_shape, rows, want):
    info = dataclasses.replace(
        DETECT, task=task, payload_shape=kpt_shape, rows=rows, head="e2e" if rows else "nms"
    )
    lay = score_layout(info)
    assert lay == want
    # the demo models: 8 classes, 5 keypoints x y v -> (1, 27, 2100) / (1, 300, 21); OBB (1, 13, 2100) / (1, 300, 7)
    assert lay.channels == {
        ("pose", False): 27,
        ("pose", True): 6 + 34,
        ("obb", False): 13,
        ("obb", True): 7,
        ("detect", False): 12,
        ("detect", True): 6,
    }.get((task, rows))
    assert _expected_outputs(info) == (2 if task == "segment" else 1)


def test_check_output_layout_refuses_in_one_line():
    pose = dataclasses.replace(DETECT, task="pose", payload_shape=(5, 3))
    check_output_layout(pose, 1, 27)
    check_output_layout(pose, 1, None)  # not static: nothing to check
    with pytest.raises(
        InputError, match=r"kpt_shape \[5, 3\] outputs 27 values per anchor, found 26"
    ):
        check_output_layout(pose, 1, 26)
    with pytest.raises(
        InputError, match=r"expected one output tensor \(boxes, scores and keypoints\), found 2"
    ):
        check_output_layout(pose, 2, 27)
    obb_rows = dataclasses.replace(DETECT, task="obb", rows=True, head="e2e")
    with pytest.raises(InputError, match="outputs 7 values per row, found 6"):
        check_output_layout(obb_rows, 1, 6)
    seg = dataclasses.replace(DETECT, task="segment")
    check_output_layout(seg, 2, 44)  # the coefficient count is not in the metadata: not checked
