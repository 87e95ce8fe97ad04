"""Keypoint labels of the shapes demo: the detection demo unchanged, keypoints where the shapes'
extremes are, visibility by the owner map, files Ultralytics reads, a flip_idx that is a flip."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from det_calib.demo import _demo_root
from det_calib.demo.shapes import _write_split, render_image, render_with_owners
from det_calib.tasks.pose.demo_labels import (
    FLIP_IDX,
    KPT_SHAPE,
    keypoint_visibility,
    object_keypoints,
    render_keypoints,
    rendered_keypoints,
    write_pose_split,
)

pytestmark = pytest.mark.fast


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _box_lines(labels: np.ndarray) -> list[str]:
    return [f"{int(c)} {x:.6f} {y:.6f} {bw:.6f} {bh:.6f}" for c, x, y, bw, bh in labels]


def test_pose_lines_start_with_the_committed_fixture_boxes(tmp_path):
    """The committed fixture labels were written before keypoints existed: each pose line begins
    with the same box text, so neither the random stream nor the box rule moved."""
    lbl_dir = _demo_root() / "fixture" / "labels" / "fixture"
    files = sorted(lbl_dir.glob("*.txt"))
    assert len(files) >= 10
    write_pose_split(tmp_path, "fixture", len(files))
    for f in files:
        fixture = f.read_text().splitlines()
        pose = (tmp_path / "labels" / "fixture" / f.name).read_text().splitlines()
        assert [" ".join(p.split()[:5]) for p in pose] == fixture
        assert all(len(p.split()) == 5 + KPT_SHAPE[0] * KPT_SHAPE[1] for p in pose)


def test_render_keypoints_returns_the_detection_image_and_labels():
    for i in range(3):
        img, labels = render_image(0, "test", i)
        img2, labels2, kp = render_keypoints(0, "test", i)
        assert np.array_equal(img, img2) and np.array_equal(labels, labels2)
        assert kp.shape == (len(labels), *KPT_SHAPE)


def test_pose_split_leaves_the_detection_split_byte_identical(tmp_path):
    det, pose = tmp_path / "det", tmp_path / "pose"
    _write_split(det, "calib", 5)
    before = _tree_digest(det)
    n = write_pose_split(pose, "calib", 5, images_from=det)
    assert _tree_digest(det) == before
    for name in before:
        if name.startswith("images/"):
            assert (pose / name).stat().st_ino == (det / name).stat().st_ino
    assert (
        n
        == sum(len((det / k).read_text().splitlines()) for k in before if k.startswith("labels/"))
        > 0
    )


def test_keypoints_of_a_known_shape():
    """A diamond (cv2 frame) centred at (10, 10): its corners are the extremes, +0.5 to the pixel-edge frame."""
    outline = np.array([[10.0, 6.0], [13.0, 10.0], [10.0, 14.0], [7.0, 10.0]])
    kp = object_keypoints(outline)
    assert kp.tolist() == [[10.5, 10.5], [10.5, 6.5], [13.5, 10.5], [10.5, 14.5], [7.5, 10.5]]
    owners = np.full((20, 16), -1)
    owners[:, 13:15] = 3  # a later object over two columns; the diamond is object 1
    vis = keypoint_visibility(np.vstack([kp, [[-0.5, 3.0], [5.0, 20.0], [16.0, 1.0]]]), owners, 1)
    assert vis.tolist() == [2, 2, 1, 2, 2, 0, 0, 0]
    owners[:, 13:15] = 0  # an earlier object there does not hide the point
    assert keypoint_visibility(kp, owners, 1).tolist() == [2] * 5


def test_flip_idx_is_a_horizontal_flip():
    """Mirroring every demo shape left-right moves its keypoints to the mirrored positions in the
    order FLIP_IDX gives (what Ultralytics' flip augmentation assumes)."""
    checked = 0
    for i in range(30):
        r = render_with_owners(0, "calib", i)
        w = r.owners.shape[1]
        for k in r.labelled:
            o = r.outlines[k]
            mirrored = np.c_[w - 1 - o[:, 0], o[:, 1]]
            expect = object_keypoints(o)
            expect[:, 0] = w - expect[:, 0]
            np.testing.assert_allclose(
                object_keypoints(mirrored)[list(FLIP_IDX)], expect, atol=1e-9
            )
            checked += 1
    assert checked > 50


def test_demo_keypoints_follow_the_owner_map():
    """On demo images: v in {0, 1, 2}; v = 0 exactly where the point is outside the image, with
    x = y = 0; v = 1 exactly where a later object owns the point's pixel; the extremes bound the
    object's visible pixels on every side where they are visible; the centre is the outline's."""
    counts = np.zeros(3, dtype=int)
    for i in range(40):
        r = render_with_owners(0, "test", i)
        h, w = r.owners.shape
        kp = rendered_keypoints(r)
        for row, k in zip(kp, r.labelled):
            full = r.outlines[k] + 0.5
            v = row[:, 2].astype(int)
            counts += np.bincount(v, minlength=3)
            raw = object_keypoints(r.outlines[k])
            outside = (raw[:, 0] < 0) | (raw[:, 0] >= w) | (raw[:, 1] < 0) | (raw[:, 1] >= h)
            assert np.array_equal(v == 0, outside)
            assert (row[v == 0, :2] == 0).all()
            lab = v > 0
            assert np.array_equal(row[lab, :2], raw[lab])
            ix, iy = np.floor(raw[lab]).astype(int).T
            assert np.array_equal(v[lab] == 1, r.owners[iy, ix] > k)
            np.testing.assert_allclose(raw[0], full.mean(0), atol=1e-9)
            ys, xs = np.nonzero(r.owners == k)
            # the visible pixels lie inside [left, right] x [top, bottom] of the drawn outline, up to
            # the raster and a hollow shape's line (3 px at most)
            assert xs.min() >= raw[4, 0] - 3 and xs.max() + 1 <= raw[2, 0] + 3
            assert ys.min() >= raw[1, 1] - 3 and ys.max() + 1 <= raw[3, 1] + 3
    assert counts[0] > 0 and counts[1] > 0 and counts[2] > 10 * counts[1]


def test_ultralytics_reads_the_pose_labels(tmp_path):
    """Ultralytics' own label check accepts every file as pose labels (kpt_shape [5, 3]), with the
    detect boxes and the keypoints written."""
    from ultralytics.data.utils import verify_image_label

    _write_split(tmp_path / "det", "calib", 10)
    write_pose_split(tmp_path / "pose", "calib", 10, images_from=tmp_path / "det")
    n = 0
    for i in range(10):
        stem = f"calib_{i:05d}"
        img = tmp_path / "pose" / "images" / "calib" / f"{stem}.png"
        lbl = tmp_path / "pose" / "labels" / "calib" / f"{stem}.txt"
        r = verify_image_label((str(img), str(lbl), "", True, 8, KPT_SHAPE[0], KPT_SHAPE[1], False))
        assert r[8] == 0 and r[9] == "", r[9]
        det = np.loadtxt(tmp_path / "det" / "labels" / "calib" / f"{stem}.txt", ndmin=2).reshape(
            -1, 5
        )
        np.testing.assert_allclose(r[1], det, atol=2e-6)
        _, labels, kp = render_keypoints(0, "calib", i)
        hh, ww = r[2]
        np.testing.assert_allclose(r[4][..., :2] * [ww, hh], kp[..., :2], atol=1e-3)
        assert np.array_equal(r[4][..., 2], kp[..., 2])
        n += len(det)
    assert n > 20


def test_demo_pose_data_yaml_writes_a_separate_root(tmp_path, monkeypatch):
    """In a fresh cache (splits shrunk): the detection demo untouched by the pose step, a root of
    its own, a yaml Ultralytics reads with kpt_shape and flip_idx, nothing rewritten on a second
    call, the train split with with_train."""
    import yaml as pyyaml

    from det_calib.demo import demo_data_yaml
    from det_calib.demo.shapes import SPLIT_SIZES

    monkeypatch.setenv("DET_CALIB_CACHE", str(tmp_path))
    for split, n in (("train", 3), ("calib", 4), ("test", 2)):
        monkeypatch.setitem(SPLIT_SIZES, split, n)
    det = demo_data_yaml().parent
    before = _tree_digest(det)
    yml = demo_data_yaml(task="pose")
    assert _tree_digest(det) == before
    assert yml.parent.name == "shapes-v1-seed0-pose1" and yml.parent.parent == det.parent
    d = pyyaml.safe_load(yml.read_text())
    assert (
        d["kpt_shape"] == list(KPT_SHAPE)
        and d["flip_idx"] == list(FLIP_IDX)
        and d["train"] == "images/calib"
    )
    assert (
        d["kpt_names"][0] == ["centre", "top", "right", "bottom", "left"] and len(d["names"]) == 8
    )
    label = yml.parent / "labels" / "calib" / "calib_00000.txt"
    stamp = label.stat().st_mtime_ns
    assert demo_data_yaml(task="pose") == yml and label.stat().st_mtime_ns == stamp
    yml = demo_data_yaml(task="pose", with_train=True)
    assert pyyaml.safe_load(yml.read_text())["train"] == "images/train"
    assert len(list((yml.parent / "labels" / "train").glob("*.txt"))) == 3
    assert not list(yml.parent.glob(".*tmp*"))
