"""The embedded default: the shapes generator and the committed demo detector."""

from __future__ import annotations

import filecmp
import subprocess
import sys

import numpy as np
import pytest

from det_calib.demo.shapes import (
    _DISTRACTORS,
    CLASS_NAMES,
    SPLIT_SIZES,
    _write_split,
    render_image,
)


@pytest.mark.fast
def test_same_seed_same_images_and_labels(tmp_path):
    for i in range(6):
        a_img, a_lbl = render_image(0, "test", i)
        b_img, b_lbl = render_image(0, "test", i)
        np.testing.assert_array_equal(a_img, b_img)
        np.testing.assert_array_equal(a_lbl, b_lbl)
    # another seed or split gives other images
    assert not np.array_equal(render_image(1, "test", 0)[0], render_image(0, "test", 0)[0])
    assert not np.array_equal(render_image(0, "calib", 0)[0], render_image(0, "test", 0)[0])
    # written files are byte-identical run to run
    _write_split(tmp_path / "a", "calib", 5, seed=0)
    _write_split(tmp_path / "b", "calib", 5, seed=0)
    for kind in ("images", "labels"):
        cmp = filecmp.dircmp(tmp_path / "a" / kind / "calib", tmp_path / "b" / kind / "calib")
        assert not cmp.diff_files and not cmp.left_only and not cmp.right_only
        names = sorted(p.name for p in (tmp_path / "a" / kind / "calib").iterdir())
        _, mismatch, errors = filecmp.cmpfiles(
            tmp_path / "a" / kind / "calib", tmp_path / "b" / kind / "calib", names, shallow=False
        )
        assert not mismatch and not errors


@pytest.mark.fast
def test_labels_are_valid_and_varied():
    labels, sizes, empty = [], [], 0
    for i in range(150):
        img, lbl = render_image(0, "calib", i)
        assert img.dtype == np.uint8 and img.ndim == 3
        if len(lbl) == 0:
            empty += 1
            continue
        assert ((lbl[:, 1:] >= 0) & (lbl[:, 1:] <= 1)).all()
        assert (lbl[:, 3:] > 0).all()
        assert ((lbl[:, 0] >= 0) & (lbl[:, 0] < len(CLASS_NAMES))).all()
        # boxes stay inside the image
        assert (lbl[:, 1] - lbl[:, 3] / 2 >= -1e-9).all() and (
            lbl[:, 1] + lbl[:, 3] / 2 <= 1 + 1e-9
        ).all()
        labels.append(lbl)
        sizes.append(np.tile(img.shape[1::-1], (len(lbl), 1)))
    lbl = np.concatenate(labels)
    px = np.concatenate(sizes) * lbl[:, 3:5]
    assert len(CLASS_NAMES) >= 6 and set(lbl[:, 0].astype(int)) == set(range(len(CLASS_NAMES)))
    assert empty >= 3  # some images without objects
    # sizes from a few pixels to a large share of the image
    assert px.max(1).min() <= 10 and px.max(1).max() >= 150
    assert _DISTRACTORS and "pentagon" in _DISTRACTORS


@pytest.mark.fast
def test_split_sizes_are_non_empty_and_held_out_splits_are_stable():
    assert set(SPLIT_SIZES) == {"train", "calib", "test"}
    assert all(n > 0 for n in SPLIT_SIZES.values())
    assert SPLIT_SIZES["calib"] >= 300 and SPLIT_SIZES["test"] >= 300


@pytest.mark.fast
def test_committed_fixture_matches_the_generator(fixture_images):
    import cv2

    for k, path in enumerate(fixture_images[:3]):
        img, lbl = render_image(0, "fixture", k)
        jpg = cv2.imread(str(path))
        assert jpg.shape == img.shape
        # JPEG (quality 95) of a noisy render: close, not equal
        assert np.abs(jpg.astype(int) - img.astype(int)).mean() < 12
        assert np.corrcoef(jpg.ravel(), img.ravel())[0, 1] > 0.9
        txt = path.parent.parent.parent / "labels" / "fixture" / (path.stem + ".txt")
        np.testing.assert_allclose(np.loadtxt(txt, ndmin=2).reshape(-1, 5), lbl, atol=1e-6)


def test_demo_model_loads_in_plain_ultralytics(demo_model_path, fixture_images):
    """The committed detector loads and predicts with plain Ultralytics, with the dataset's names."""
    code = (
        "import sys, json\n"
        "from ultralytics import YOLO\n"
        "m = YOLO(sys.argv[1])\n"
        "r = m.predict(sys.argv[2], imgsz=320, verbose=False)[0]\n"
        "print(json.dumps({'task': m.task, 'names': [m.names[i] for i in sorted(m.names)], 'n': "
        "len(r.boxes)}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(demo_model_path), str(fixture_images[0])],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    import json

    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["task"] == "detect"
    assert info["names"] == list(CLASS_NAMES)
    assert info["n"] >= 1


@pytest.mark.parametrize("size_limit_mb", [8])
def test_demo_model_is_small(demo_model_path, size_limit_mb):
    assert demo_model_path.stat().st_size < size_limit_mb * 2**20


@pytest.mark.slow
def test_demo_model_meets_the_quality_bar(demo_model_path):
    """The committed detector is real and imperfect on the test split: mAP50 >= 0.5 with the
    default head (Ultralytics val), and both correct and incorrect boxes above conf 0.25."""
    from det_calib.demo import model_figures

    f = model_figures(demo_model_path, split="test", head="nms")
    assert f["map50"] >= 0.5, f
    # plenty of both kinds: something to calibrate
    assert f["correct"] >= 200 and f["incorrect"] >= 100, f


def test_demo_data_of_each_task(tmp_path, monkeypatch):
    """``demo_data_yaml(task=...)`` gives a task's own demo data (its folder's demo part: the classify
    task's class folders, here), the detector's for a task without any, and refuses an unknown task
    in one line (the segment, pose and OBB roots: tests/demo/test_shapes_*.py)."""
    from det_calib.demo import demo_data_yaml
    from det_calib.errors import InputError

    monkeypatch.setenv("DET_CALIB_CACHE", str(tmp_path))
    for split, n in (("train", 2), ("calib", 2), ("test", 1)):
        monkeypatch.setitem(SPLIT_SIZES, split, n)
    det = demo_data_yaml()
    assert demo_data_yaml(task="detect") == det and det.parent.name == "shapes-v1-seed0"
    crops = demo_data_yaml(task="classify")
    assert crops.parent == tmp_path and crops.name == "shapes-classify-v1-seed0"
    assert sorted(p.name for p in crops.iterdir() if p.is_dir()) == ["test", "val"]
    assert demo_data_yaml(task="classify", with_train=True) == crops
    assert sorted(p.name for p in crops.iterdir() if p.is_dir()) == ["test", "train", "val"]
    with pytest.raises(InputError, match=r"^no task `nope`: the tasks are detect, segment, pose"):
        demo_data_yaml(task="nope")
