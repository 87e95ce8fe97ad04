"""Rotated-box labels of the shapes demo: the detection demo unchanged, the minimum-area rectangle
of each object's visible pixels (inside the image), files Ultralytics reads."""

from __future__ import annotations

import hashlib
from pathlib import Path

import cv2
import numpy as np
import pytest

from det_calib.demo import _demo_root
from det_calib.demo.shapes import _write_split, render_image, render_with_owners
from det_calib.tasks.obb.demo_labels import (
    min_area_rect,
    region_rect,
    render_rects,
    write_obb_split,
)

pytestmark = pytest.mark.fast


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _area(q: np.ndarray) -> float:
    return float(np.hypot(*(q[1] - q[0])) * np.hypot(*(q[3] - q[0])))


def _pixel_corners(mask: np.ndarray) -> np.ndarray:
    ys, xs = np.nonzero(mask)
    return np.concatenate(
        [np.stack([xs + dx, ys + dy], 1) for dx in (0, 1) for dy in (0, 1)]
    ).astype(np.float64)


def _inside(q: np.ndarray, pts: np.ndarray, tol: float = 1e-6) -> bool:
    """Every point inside the convex quadrilateral ``q`` (clockwise on screen)."""
    for a, b in zip(q, np.roll(q, -1, axis=0)):
        cross = (b[0] - a[0]) * (pts[:, 1] - a[1]) - (b[1] - a[1]) * (pts[:, 0] - a[0])
        if (cross < -tol * np.hypot(*(b - a))).any():
            return False
    return True


def test_obb_split_leaves_the_detection_split_byte_identical(tmp_path):
    det, obb = tmp_path / "det", tmp_path / "obb"
    _write_split(det, "calib", 5)
    before = _tree_digest(det)
    n = write_obb_split(obb, "calib", 5, images_from=det)
    assert _tree_digest(det) == before
    for name in before:
        if name.startswith("images/"):
            assert (obb / name).stat().st_ino == (det / name).stat().st_ino
    assert (
        n
        == sum(len((det / k).read_text().splitlines()) for k in before if k.startswith("labels/"))
        > 0
    )


def test_render_rects_returns_the_fixture_labels():
    """The box labels beside the rectangles are the committed fixture's text."""
    files = sorted((_demo_root() / "fixture" / "labels" / "fixture").glob("*.txt"))
    assert len(files) >= 10
    for f in files:
        i = int(f.stem.split("_")[1])
        img, labels, rects = render_rects(0, "fixture", i)
        assert np.array_equal(img, render_image(0, "fixture", i)[0])
        lines = [f"{int(c)} {x:.6f} {y:.6f} {bw:.6f} {bh:.6f}" for c, x, y, bw, bh in labels]
        assert f.read_text() == "\n".join(lines) + ("\n" if lines else "") and len(rects) == len(
            labels
        )


def test_min_area_rect_equals_opencv_on_random_point_sets():
    rng = np.random.default_rng(0)
    for _ in range(200):
        pts = (
            rng.normal(size=(int(rng.integers(3, 40)), 2))
            * rng.uniform(1, 50, size=2)
            @ np.linalg.qr(rng.normal(size=(2, 2)))[0]
        )
        q = min_area_rect(pts)
        (_, _), (w, h), _ = cv2.minAreaRect(pts.astype(np.float32))
        assert _area(q) == pytest.approx(w * h, rel=1e-4)
        assert _inside(q, pts, tol=1e-4)
        # a rectangle: sides at right angles
        assert abs(np.dot(q[1] - q[0], q[3] - q[0])) <= 1e-6 * _area(q) + 1e-9


def test_min_area_rect_known_answers():
    tilted = np.array([[0, 1], [1, 0], [3, 2], [2, 3]], dtype=float)
    assert _area(min_area_rect(tilted)) == pytest.approx(4.0)
    # inside a 3x3 image the tilted rectangle would reach x < 0: the smallest rectangle inside it
    # is the axis-aligned box
    inside = min_area_rect(tilted + [0.2, 0.0], width=3.2, height=3.0)
    assert _area(inside) == pytest.approx(4.0)
    # a diagonal strip cut by the image corner: its smallest rectangle (9 px2, along the diagonal)
    # reaches y < 0; inside the image only the axis-aligned box is left
    cut = np.array([[0, 0], [1, 0], [5, 4], [4, 5], [0, 1]], dtype=float)
    assert _area(min_area_rect(cut)) == pytest.approx(9.0)
    q = min_area_rect(cut, width=10, height=10)
    assert _area(q) == pytest.approx(25.0) and sorted(map(tuple, q.tolist())) == [
        (0, 0),
        (0, 5),
        (5, 0),
        (5, 5),
    ]
    square = np.array([[1, 1], [5, 1], [5, 5], [1, 5]], dtype=float)  # ties: axis-aligned
    assert min_area_rect(square).tolist() == [[1, 1], [5, 1], [5, 5], [1, 5]]


def test_region_rects_cover_the_visible_pixels():
    """On demo images: every visible pixel lies wholly inside its object's rectangle, which lies in
    the image and is no larger than the detect box; where OpenCV's unconstrained minimum fits in
    the image, the area is OpenCV's."""
    checked = fitted = 0
    for i in range(40):
        r = render_with_owners(0, "test", i)
        h, w = r.owners.shape
        _, labels, rects = render_rects(0, "test", i)
        for lab, k, q in zip(labels, r.labelled, rects):
            corners = _pixel_corners(r.owners == k)
            assert _inside(q, corners)
            assert (q >= 0).all() and (q[:, 0] <= w).all() and (q[:, 1] <= h).all()
            assert _area(q) <= lab[3] * w * lab[4] * h * (1 + 1e-9)
            box = cv2.boxPoints(cv2.minAreaRect(corners.astype(np.float32)))
            if box.min() >= 0 and box[:, 0].max() <= w and box[:, 1].max() <= h:
                (_, _), (bw, bh), _ = cv2.minAreaRect(corners.astype(np.float32))
                assert _area(q) == pytest.approx(bw * bh, rel=1e-4)
                fitted += 1
            checked += 1
    assert checked > 100 and fitted > checked // 2


def test_region_rect_of_an_empty_or_tiny_region():
    m = np.zeros((8, 8), np.uint8)
    assert region_rect(m) is None
    m[3, 4] = 1
    assert sorted(map(tuple, region_rect(m).tolist())) == [(4, 3), (4, 4), (5, 3), (5, 4)]


def test_ultralytics_reads_the_obb_labels(tmp_path):
    """Ultralytics' label check accepts every file; its rotated box of each line (xyxyxyxy2xywhr)
    has the rectangle's size."""
    from ultralytics.data.utils import verify_image_label
    from ultralytics.utils.ops import xyxyxyxy2xywhr

    _write_split(tmp_path / "det", "calib", 10)
    write_obb_split(tmp_path / "obb", "calib", 10, images_from=tmp_path / "det")
    n = 0
    for i in range(10):
        stem = f"calib_{i:05d}"
        img = tmp_path / "obb" / "images" / "calib" / f"{stem}.png"
        lbl = tmp_path / "obb" / "labels" / "calib" / f"{stem}.txt"
        r = verify_image_label((str(img), str(lbl), "", False, 8, 0, 0, False))
        assert r[8] == 0 and r[9] == "", r[9]
        _, labels, rects = render_rects(0, "calib", i)
        assert len(r[3]) == len(rects)
        hh, ww = r[2]
        for seg, q in zip(r[3], rects):
            xywhr = xyxyxyxy2xywhr((seg * [ww, hh]).reshape(1, 8))[0]
            assert xywhr[2] * xywhr[3] == pytest.approx(_area(q), rel=1e-4, abs=0.05)
        n += len(rects)
    assert n > 20


def test_demo_obb_data_yaml_writes_a_separate_root(tmp_path, monkeypatch):
    from det_calib.demo import demo_data_yaml
    from det_calib.demo.shapes import SPLIT_SIZES

    monkeypatch.setenv("DET_CALIB_CACHE", str(tmp_path))
    for split, n in (("train", 2), ("calib", 3), ("test", 2)):
        monkeypatch.setitem(SPLIT_SIZES, split, n)
    det = demo_data_yaml().parent
    before = _tree_digest(det)
    yml = demo_data_yaml(task="obb")
    assert _tree_digest(det) == before
    assert yml.parent.name == "shapes-v1-seed0-obb1" and "train: images/calib" in yml.read_text()
    yml = demo_data_yaml(task="obb", with_train=True)
    assert "train: images/train" in yml.read_text()
    assert len(list((yml.parent / "labels" / "train").glob("*.txt"))) == 2
