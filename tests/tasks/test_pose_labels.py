"""YOLO pose labels and COCO keypoints read as ground truth (det_calib.tasks.pose.labels)."""

from __future__ import annotations

import json
import re
import shutil
import warnings

import numpy as np
import pytest

from det_calib.data.ground_truth import load_data_yaml, load_split
from det_calib.demo.shapes import CLASS_NAMES, render_with_owners
from det_calib.errors import InputError
from det_calib.tasks import get_task
from det_calib.tasks.pose.demo_labels import FLIP_IDX, rendered_keypoints, write_pose_split
from det_calib.tasks.pose.labels import (
    _YOLO_AREA_FACTOR,
    AREA_COLUMN,
    NUM_KEYPOINTS_COLUMN,
    PoseSpec,
    _check_pose_line,
    _read_pose_file,
    has_keypoints,
    load_pose_split,
    pose_spec,
    split_keypoints,
)

pytestmark = pytest.mark.fast

N_IMAGES = 8
NAMES = "\n".join(f"  {i}: {n}" for i, n in enumerate(CLASS_NAMES))


def _yaml(root, extra="kpt_shape: [5, 3]\nflip_idx: [0, 1, 4, 3, 2]\n"):
    (root / "data.yaml").write_text(
        f"path: {root}\nval: images/test\ntest: images/test\nnames:\n{NAMES}\n{extra}"
    )
    return root / "data.yaml"


@pytest.fixture(scope="module")
def pose_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("pose")
    write_pose_split(root, "test", N_IMAGES)
    _yaml(root)
    return root


@pytest.fixture
def pose_copy(pose_root, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(pose_root, dst)
    _yaml(dst)
    return dst


BOX = "2 0.5 0.5 0.2 0.2"
GOOD = " 0.5 0.5 2 0.5 0.4 2 0.6 0.5 1 0.5 0.6 2 0 0 0"
# line, reason (None: accepted), whether Ultralytics' verify_image_label (keypoint=True, [5, 3]) drops the file too
POSE_CASES = [
    (BOX + GOOD, None, False),
    (
        BOX + " 0.5 0.5 2.0 0.5 0.4 2.000000 0.6 0.5 1.0 0.5 0.6 2 0.0 0.0 0.0",
        None,
        False,
    ),  # float visibilities
    (
        BOX + GOOD + " 0.1 0.1 2",
        "expected 20 values `cls cx cy w h` and 5 keypoints `x y v` (kpt_shape [5, 3]), got 23 (6 "
        "keypoints)",
        True,
    ),
    (BOX + GOOD[: GOOD.rindex(" 0 0 0")], "got 17 (4 keypoints)", True),
    (
        BOX + GOOD[:-2] + " 3",
        "keypoint 5: visibility 3 not in {0, 1, 2}",
        False,
    ),  # Ultralytics keeps it
    (BOX + GOOD[:-2] + " 1.5", "keypoint 5: visibility 1.5 not in {0, 1, 2}", False),
    (
        BOX + " 0.5 1.2 2" + GOOD[10:],
        "keypoint 1 outside the image: value 1.2 outside [0, 1]",
        True,
    ),
    (BOX + " 0.5 1.005 2" + GOOD[10:], None, False),  # within Ultralytics' 1% tolerance
    (BOX + " 0.5 nan 2" + GOOD[10:], "keypoint 1: non-finite value `nan`", True),
    ("9 0.5 0.5 0.2 0.2" + GOOD, "class id 9 out of range 0..7", True),
    ("2 0.5 0.5 0 0.2" + GOOD, "width 0 is zero", False),
]


@pytest.mark.parametrize(("line", "reason", "ultralytics_drops"), POSE_CASES)
def test_pose_line_checks_name_file_and_line_and_agree_with_ultralytics(
    pose_copy, line, reason, ultralytics_drops
):
    from ultralytics.data.utils import verify_image_label

    img = pose_copy / "images" / "test" / "test_00000.png"
    lbl = pose_copy / "labels" / "test" / "test_00000.txt"
    lbl.write_text(BOX + GOOD + "\n\n" + line + "\n")
    rows, problem = _read_pose_file(lbl, nc=8, nkpt=5, ndim=3)
    if reason is None:
        same = (
            np.array(line.split(), float).tolist() == np.array((BOX + GOOD).split(), float).tolist()
        )
        assert problem is None and len(rows) == (
            1 if same else 2
        )  # a duplicate by value is dropped
        np.testing.assert_array_equal(rows[-1][1], np.array(line.split()[5:], float).reshape(5, 3))
    else:
        assert rows == [] and problem.startswith(f"{lbl}:3: ") and reason in problem, problem
    r = verify_image_label((str(img), str(lbl), "", True, 8, 5, 3, False))
    assert (r[8] == 1) == ultralytics_drops, r[9]


def test_two_value_keypoints_are_visible():
    box, reason = _check_pose_line((BOX + " 0.1 0.2 0.3 0.4").split(), nc=8, nkpt=2, ndim=2)
    assert reason is None and box == [2.0, 0.5, 0.5, 0.2, 0.2]
    assert (
        "`x y` (kpt_shape [2, 2]), got 8"
        in _check_pose_line((BOX + " 0.1 0.2 0.3").split(), nc=8, nkpt=2, ndim=2)[1]
    )


def test_pose_split_has_the_demo_keypoints_row_for_row(pose_root):
    data = load_data_yaml(pose_root / "data.yaml")
    assert pose_spec(data) == PoseSpec(nkpt=5, ndim=3, flip_idx=FLIP_IDX)
    sp = load_pose_split(data, "test")
    plain = load_split(
        data, "test", check_line=lambda t, nc: _check_pose_line(t, nc=nc, nkpt=5, ndim=3)
    )
    assert sp.gt.drop(get_task("pose").payload, AREA_COLUMN, NUM_KEYPOINTS_COLUMN).equals(
        plain.gt
    ) and has_keypoints(sp)
    kp = split_keypoints(sp)
    for i in range(N_IMAGES):
        want = rendered_keypoints(render_with_owners(0, "test", i))
        rows = np.flatnonzero(sp.gt["image_id"].to_numpy() == i)
        np.testing.assert_allclose(kp[rows], want, atol=1e-6 * 400)
    gt = sp.gt
    np.testing.assert_allclose(
        gt[AREA_COLUMN].to_numpy(),
        _YOLO_AREA_FACTOR * ((gt["x2"] - gt["x1"]) * (gt["y2"] - gt["y1"])).to_numpy(),
    )
    assert gt[NUM_KEYPOINTS_COLUMN].to_list() == (kp[:, :, 2] > 0).sum(1).tolist()


def test_malformed_pose_files_warn_and_are_left_out_like_box_labels(pose_copy):
    lbls = sorted((pose_copy / "labels" / "test").glob("*.txt"))
    for lbl in lbls[:4]:
        lbl.write_text(lbl.read_text() + BOX + GOOD[:-2] + " 7\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sp = load_pose_split(load_data_yaml(pose_copy / "data.yaml"), "test")
    msgs = [str(w.message) for w in caught if "malformed" in str(w.message)]
    assert (
        len(msgs) == 4
        and "and 1 more files with malformed labels (4 of 8 images left out)" in msgs[3]
    )
    assert "visibility 7 not in {0, 1, 2}" in msgs[0]
    assert len(sp.images) == N_IMAGES - 4 and len(sp.bad_labels) == 4
    for lbl in lbls[4:]:
        lbl.write_text(BOX + " 0.5 0.5 2\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(
            InputError, match=r"label files of all 8 are malformed \(first: .*visibility 7"
        ):
            load_pose_split(load_data_yaml(pose_copy / "data.yaml"), "test")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("", "pose labels need `kpt_shape: [K, 3]`"),
        ("kpt_shape: [5, 4]\n", "`kpt_shape` must be [K, 2] or [K, 3]"),
        ("kpt_shape: 5\n", "`kpt_shape` must be a list of integers"),
        ("kpt_shape: [5, 3]\nflip_idx: [0, 1, 2, 3]\n", "`flip_idx` must be a permutation of 0..4"),
        (
            "kpt_shape: [5, 3]\nkpt_oks_sigmas: [0.1, 0.1]\n",
            "`kpt_oks_sigmas` must be 5 positive numbers",
        ),
    ],
)
def test_bad_pose_yaml_is_one_line(pose_copy, extra, message):
    _yaml(pose_copy, extra)
    with pytest.raises(InputError, match=re.escape(message)):
        load_pose_split(load_data_yaml(pose_copy / "data.yaml"), "test")


def test_model_keypoint_count_must_match_the_yaml(pose_root):
    with pytest.raises(InputError, match=r"kpt_shape \[5, 3\] but the model has 17 keypoints"):
        load_pose_split(load_data_yaml(pose_root / "data.yaml"), "test", spec=PoseSpec(17, 3))


def _coco_json(root, path, *, crowd=True):
    """COCO keypoints JSON of the YOLO split, plus a crowd annotation without keypoints."""
    sp = load_pose_split(load_data_yaml(root / "data.yaml"), "test")
    kp = split_keypoints(sp)
    images, anns = [], []
    for i, (p, (w, h)) in enumerate(zip(sp.images, sp.sizes)):
        images.append({"id": 100 + i, "file_name": p.name, "width": int(w), "height": int(h)})
    for j, row in enumerate(sp.gt.iter_rows(named=True)):
        bw, bh = row["x2"] - row["x1"], row["y2"] - row["y1"]
        anns.append(
            {
                "id": j + 1,
                "image_id": 100 + row["image_id"],
                "category_id": row["cls"] + 1,
                "iscrowd": 0,
                "bbox": [row["x1"], row["y1"], bw, bh],
                "area": bw * bh * 0.7,
                "keypoints": kp[j].reshape(-1).tolist(),
                "num_keypoints": int((kp[j, :, 2] > 0).sum()),
            }
        )
    if crowd:
        anns.append(
            {
                "id": 999,
                "image_id": 100,
                "category_id": 1,
                "iscrowd": 1,
                "bbox": [0, 0, 50, 50],
                "area": 2500.0,
                "num_keypoints": 0,
                "keypoints": [0] * 15,
            }
        )
    cats = [
        {"id": i + 1, "name": n, "keypoints": ["c", "t", "r", "b", "l"]}
        for i, n in enumerate(CLASS_NAMES)
    ]
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return sp


def test_coco_keypoints(pose_root, tmp_path):
    js = tmp_path / "gt.json"
    ref = _coco_json(pose_root, js)
    sp = load_pose_split(load_data_yaml(pose_root / "data.yaml"), "test", coco_gt=js)
    crowd = sp.gt["crowd"].to_numpy()
    assert crowd.sum() == 1 and sp.gt.height == ref.gt.height + 1
    np.testing.assert_allclose(split_keypoints(sp)[~crowd], split_keypoints(ref))
    ref_area = ((ref.gt["x2"] - ref.gt["x1"]) * (ref.gt["y2"] - ref.gt["y1"])).to_numpy() * 0.7
    np.testing.assert_allclose(sp.gt[AREA_COLUMN].to_numpy()[~crowd], ref_area)
    assert sp.gt[NUM_KEYPOINTS_COLUMN].to_numpy()[crowd].tolist() == [0]
    # without kpt_shape in the yaml the JSON's layout is used
    _yaml(pose_root, "")
    try:
        assert split_keypoints(
            load_pose_split(load_data_yaml(pose_root / "data.yaml"), "test", coco_gt=js)
        ).shape[1:] == (5, 3)
    finally:
        _yaml(pose_root)


def test_coco_keypoint_counts_must_agree(pose_root, tmp_path):
    js = tmp_path / "gt.json"
    _coco_json(pose_root, js, crowd=False)
    d = json.loads(js.read_text())
    d["annotations"][0]["keypoints"] = d["annotations"][0]["keypoints"][:12]
    js.write_text(json.dumps(d))
    with pytest.raises(
        InputError,
        match=r"annotation 1 has 12 keypoint values, expected 15 \(5 keypoints `x y v`\)",
    ):
        load_pose_split(load_data_yaml(pose_root / "data.yaml"), "test", coco_gt=js)
    for a in d["annotations"]:
        a.pop("keypoints")
    js.write_text(json.dumps(d))
    with pytest.raises(
        InputError, match="no annotation with `keypoints`: not a COCO keypoints file"
    ):
        load_pose_split(load_data_yaml(pose_root / "data.yaml"), "test", coco_gt=js)
