"""YOLO OBB labels read as rotated ground-truth boxes (det_calib.tasks.obb.labels)."""

from __future__ import annotations

import re
import shutil
import warnings

import numpy as np
import pytest

from det_calib.data.ground_truth import load_data_yaml, load_split
from det_calib.demo.shapes import CLASS_NAMES
from det_calib.errors import InputError
from det_calib.tasks import get_task, load_task_split
from det_calib.tasks.obb.demo_labels import render_rects, write_obb_split
from det_calib.tasks.obb.labels import (
    _check_obb_line,
    _read_obb_file,
    corners_to_xywhr,
    has_rotated_boxes,
    split_xywhr,
)

pytestmark = pytest.mark.fast

N_IMAGES = 8


@pytest.fixture(scope="module")
def obb_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("obb")
    write_obb_split(root, "test", N_IMAGES)
    names = "\n".join(f"  {i}: {n}" for i, n in enumerate(CLASS_NAMES))
    (root / "data.yaml").write_text(
        f"path: {root}\nval: images/test\ntest: images/test\nnames:\n{names}\n"
    )
    return root


@pytest.fixture
def obb_copy(obb_root, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(obb_root, dst)
    (dst / "data.yaml").write_text(
        (obb_root / "data.yaml").read_text().replace(str(obb_root), str(dst))
    )
    return dst


GOOD = "3 0.2 0.1 0.6 0.3 0.5 0.5 0.1 0.3"
# line, reason (None: accepted), whether Ultralytics' verify_image_label drops the file too
OBB_CASES = [
    (GOOD, None, False),
    (
        "3 0.2 0.1 0.6 0.3 0.5 0.5",
        "expected 9 values `cls x1 y1 x2 y2 x3 y3 x4 y4` (4 corners), got 7 (3 corners)",
        False,
    ),  # Ultralytics reads 3 corners as a polygon
    ("3 0.2 0.1 0.6 0.3 0.5 0.5 0.1 0.3 0.2 0.2", "got 11 (5 corners)", False),
    ("3 0.2 0.1 0.6 0.3 0.5 0.5 0.1", "got 8", True),
    (
        "3 0.2 0.1 0.2 0.1 0.5 0.5 0.5 0.5",
        "degenerate quadrilateral: its corners enclose no area",
        False,
    ),
    ("3 0.1 0.1 0.2 0.2 0.3 0.3 0.4 0.4", "degenerate quadrilateral", False),  # collinear
    ("3 0.1 0.1 0.1 0.3 0.1 0.5 0.1 0.7", "quadrilateral has zero width", False),
    (
        "3 0.2 0.1 0.6 0.3 1.5 0.5 0.1 0.3",
        "corner 3 outside the image: value 1.5 outside [0, 1]",
        True,
    ),
    ("8 0.2 0.1 0.6 0.3 0.5 0.5 0.1 0.3", "class id 8 out of range 0..7", True),
    (
        "3 0.2 0.1 0.5 0.5 0.6 0.3 0.1 0.3",
        None,
        False,
    ),  # corners out of order: its hull is the same
]


@pytest.mark.parametrize(("line", "reason", "ultralytics_drops"), OBB_CASES)
def test_obb_line_checks_name_file_and_line_and_agree_with_ultralytics(
    obb_copy, line, reason, ultralytics_drops
):
    from ultralytics.data.utils import verify_image_label

    img = obb_copy / "images" / "test" / "test_00000.png"
    lbl = obb_copy / "labels" / "test" / "test_00000.txt"
    lbl.write_text("2 0.1 0.1 0.3 0.1 0.3 0.2 0.1 0.2\n\n" + line + "\n")
    rows, problem = _read_obb_file(lbl, nc=8)
    if reason is None:
        assert problem is None and len(rows) == 2
        np.testing.assert_array_equal(rows[1][1], np.array(line.split()[1:], float).reshape(4, 2))
    else:
        assert rows == [] and problem.startswith(f"{lbl}:3: ") and reason in problem, problem
    r = verify_image_label((str(img), str(lbl), "", False, 8, 0, 0, False))
    assert (r[8] == 1) == ultralytics_drops, r[9]


def test_box_of_an_obb_line_is_the_corners_box():
    box, reason = _check_obb_line(GOOD.split(), nc=8)
    assert reason is None
    np.testing.assert_allclose(box, [3, 0.35, 0.3, 0.5, 0.4])


def test_corners_to_xywhr_equals_ultralytics():
    from ultralytics.utils.ops import xyxyxyxy2xywhr

    rng = np.random.default_rng(1)
    for _ in range(100):
        c, w, h, t = rng.uniform(50, 300, 2), *rng.uniform(1, 80, 2), rng.uniform(-np.pi, np.pi)
        u, v = np.array([np.cos(t), np.sin(t)]) * w / 2, np.array([-np.sin(t), np.cos(t)]) * h / 2
        q = np.array([c - u - v, c + u - v, c + u + v, c - u + v]).reshape(1, 8)
        np.testing.assert_allclose(corners_to_xywhr(q), xyxyxyxy2xywhr(q), rtol=0, atol=1e-9)


def test_obb_split_has_the_demo_rectangles_row_for_row(obb_root):
    data = load_data_yaml(obb_root / "data.yaml")
    sp = load_task_split(data, "test", task="obb")
    plain = load_split(data, "test")  # the box reader takes an OBB line as a 4-point polygon
    assert sp.gt.drop(get_task("obb").payload).equals(plain.gt) and has_rotated_boxes(sp)
    xywhr = split_xywhr(sp)
    for i in range(N_IMAGES):
        _, _, rects = render_rects(0, "test", i)
        rows = np.flatnonzero(sp.gt["image_id"].to_numpy() == i)
        assert len(rows) == len(rects)
        for j, q in zip(rows, rects):
            side = sorted([np.hypot(*(q[1] - q[0])), np.hypot(*(q[3] - q[0]))], reverse=True)
            np.testing.assert_allclose(xywhr[j, 2:4], side, atol=1e-3)
            np.testing.assert_allclose(xywhr[j, :2], q.mean(0), atol=1e-3)
    assert (xywhr[:, 4] >= -np.pi / 4).all() and (xywhr[:, 4] < 3 * np.pi / 4).all()


def test_malformed_obb_files_warn_and_are_left_out_like_box_labels(obb_copy):
    lbls = sorted((obb_copy / "labels" / "test").glob("*.txt"))
    for lbl in lbls[:3]:
        lbl.write_text(lbl.read_text() + "3 0.2 0.1 0.6 0.3 0.5 0.5\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sp = load_task_split(load_data_yaml(obb_copy / "data.yaml"), "test", task="obb")
    msgs = [str(w.message) for w in caught if "malformed" in str(w.message)]
    assert len(msgs) == 3 and "(4 corners), got 7 (3 corners)" in msgs[0]
    assert len(sp.images) == N_IMAGES - 3 and len(sp.bad_labels) == 3
    for lbl in lbls[3:]:
        lbl.write_text("3 0.1 0.1 0.2 0.2 0.3 0.3 0.4 0.4\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(
            InputError, match=r"has no usable images: the label files of all 8 are malformed"
        ):
            load_task_split(load_data_yaml(obb_copy / "data.yaml"), "test", task="obb")


def test_coco_json_is_refused_for_obb(obb_root):
    with pytest.raises(InputError, match=re.escape("COCO JSON has no rotated boxes")):
        load_task_split(
            load_data_yaml(obb_root / "data.yaml"), "test", task="obb", coco_gt="gt.json"
        )
