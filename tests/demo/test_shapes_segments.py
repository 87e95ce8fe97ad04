"""Polygon labels of the shapes demo: the detection demo unchanged, polygons faithful to the
visible regions and to the box labels."""

from __future__ import annotations

import hashlib
from pathlib import Path

import cv2
import numpy as np
import pytest
from pycocotools import mask as mask_utils

from det_calib.demo import _demo_root, cache_dir
from det_calib.demo.shapes import _write_split, render_image, render_with_owners
from det_calib.tasks.segment.demo_labels import (
    EPSILON,
    region_polygon,
    render_polygons,
    segment_lines,
    write_segment_split,
)

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


def _raster(poly: np.ndarray, h: int, w: int) -> np.ndarray:
    """The polygon as pycocotools rasterises a COCO polygon (pixel-edge frame)."""
    rle = mask_utils.merge(mask_utils.frPyObjects([poly.reshape(-1).tolist()], h, w))
    return mask_utils.decode(rle).astype(bool)


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_render_image_is_unchanged_by_the_owner_map():
    """render_image is render_with_owners' image and labels (one code path, one random stream)."""
    for i in range(4):
        img, labels = render_image(0, "calib", i)
        r = render_with_owners(0, "calib", i)
        assert np.array_equal(img, r.image) and np.array_equal(labels, r.labels)
        assert r.owners.shape == img.shape[:2] and len(r.labelled) == len(labels)


def test_detection_labels_equal_the_committed_fixture():
    """The committed fixture labels were written by the generator before polygons existed: the
    box labels rendered now are the same text, so the random stream did not move."""
    lbl_dir = _demo_root() / "fixture" / "labels" / "fixture"
    files = sorted(lbl_dir.glob("*.txt"))
    assert len(files) >= 10
    for f in files:
        i = int(f.stem.split("_")[1])
        _, labels, _ = render_polygons(0, "fixture", i)
        lines = [f"{int(c)} {x:.6f} {y:.6f} {bw:.6f} {bh:.6f}" for c, x, y, bw, bh in labels]
        assert f.read_text() == "\n".join(lines) + ("\n" if lines else "")


def _demo_cache(small_demo, marker: str) -> Path:
    """The machine's demo cache where it holds ``marker`` (rendered there), else the session's small
    rendering of the demo (``small_demo`` in tests/conftest.py)."""
    if (cache_dir() / marker).is_file():
        return cache_dir()
    return small_demo["segment"].parents[1]


def test_cached_detection_images_equal_the_rendering(small_demo):
    """The demo cache (rendered by the detection writer): its PNGs and labels equal what is rendered
    now, pixel for pixel."""
    root = (
        _demo_cache(small_demo, "shapes-v1-seed0/images/calib/calib_00000.png") / "shapes-v1-seed0"
    )
    for i in (0, 7, 123):
        if not (root / "images" / "calib" / f"calib_{i:05d}.png").is_file():
            assert root.parent != cache_dir() and i >= 8  # only the small rendering stops early
            continue
        img, labels, _ = render_polygons(0, "calib", i)
        assert np.array_equal(
            cv2.imread(str(root / "images" / "calib" / f"calib_{i:05d}.png")), img
        )
        lines = [f"{int(c)} {x:.6f} {y:.6f} {bw:.6f} {bh:.6f}" for c, x, y, bw, bh in labels]
        assert (root / "labels" / "calib" / f"calib_{i:05d}.txt").read_text() == "\n".join(
            lines
        ) + ("\n" if lines else "")


def test_segment_split_leaves_the_detection_split_byte_identical(tmp_path):
    det, seg = tmp_path / "det", tmp_path / "seg"
    _write_split(det, "calib", 6)
    before = _tree_digest(det)
    n_poly = write_segment_split(seg, "calib", 6, images_from=det)
    assert _tree_digest(det) == before
    # the same image bytes (hard links here), a label line per box label
    det_tree, seg_tree = _tree_digest(det), _tree_digest(seg)
    for name, digest in det_tree.items():
        if name.startswith("images/"):
            assert seg_tree[name] == digest
            assert (seg / name).stat().st_ino == (det / name).stat().st_ino
    n_box = sum(
        len((det / n).read_text().splitlines()) for n in det_tree if n.startswith("labels/")
    )
    assert n_poly == n_box > 0
    # without a detection root the writer renders the same PNG bytes itself
    alone = tmp_path / "alone"
    write_segment_split(alone, "calib", 2)
    for i in range(2):
        name = f"images/calib/calib_{i:05d}.png"
        assert hashlib.sha256((alone / name).read_bytes()).hexdigest() == det_tree[name]


def test_written_polygons_match_boxes_and_regions(tmp_path):
    """Each written polygon's tight box is the detect label box within EPSILON (measured: equal),
    and pycocotools rasterises it back to the object's visible region."""
    _write_split(tmp_path / "det", "test", 12)
    write_segment_split(tmp_path / "seg", "test", 12)
    checked = 0
    for i in range(12):
        r = render_with_owners(0, "test", i)
        h, w = r.owners.shape
        box_lines = (
            (tmp_path / "det" / "labels" / "test" / f"test_{i:05d}.txt").read_text().splitlines()
        )
        seg_lines = (
            (tmp_path / "seg" / "labels" / "test" / f"test_{i:05d}.txt").read_text().splitlines()
        )
        assert len(box_lines) == len(seg_lines)
        for b, s, k in zip(box_lines, seg_lines, r.labelled):
            bv, sv = np.array(b.split(), float), np.array(s.split(), float)
            assert bv[0] == sv[0] and (len(sv) - 1) % 2 == 0 and len(sv) >= 7
            cx, cy, bw, bh = bv[1:] * [w, h, w, h]
            box = np.array([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2])
            poly = sv[1:].reshape(-1, 2) * [w, h]
            pbox = np.r_[poly.min(0), poly.max(0)]
            assert np.abs(pbox - box).max() <= EPSILON + 1e-6 * max(w, h) * 2
            region = r.owners == k
            raster = _raster(poly, h, w)
            iou = (raster & region).sum() / (raster | region).sum()
            assert iou >= 0.99, (i, int(bv[0]), iou)
            checked += 1
    assert checked > 30


def test_region_polygon_known_answers():
    m = np.zeros((20, 30), np.uint8)
    m[2:6, 3:9] = 1  # a 6x4 rectangle: its pixel-edge outline
    assert sorted(map(tuple, region_polygon(m).tolist())) == [(3, 2), (3, 6), (9, 2), (9, 6)]
    assert region_polygon(np.zeros((5, 5), np.uint8)).shape == (0, 2)


def test_region_polygon_joins_pieces_and_keeps_holes():
    """Two pieces, a ring (a hole) and a lone pixel in one polygon: pycocotools rasterises it
    back to exactly the region, and its box is the region's."""
    m = np.zeros((40, 50), np.uint8)
    m[3:10, 4:12] = 1  # piece 1
    m[25:35, 30:45] = 1  # piece 2: a ring
    m[28:32, 34:40] = 0
    m[30, 20] = 1  # a lone pixel: piece 3
    poly = region_polygon(m)
    assert np.array_equal(_raster(poly, 40, 50), m.astype(bool))
    assert np.array_equal(np.r_[poly.min(0), poly.max(0)], [4, 3, 45, 35])


def test_an_occluded_object_keeps_all_its_pieces():
    """On the demo: an object cut in pieces by later ones has one polygon covering every piece."""
    for i in range(200):
        r = render_with_owners(0, "calib", i)
        for k in r.labelled:
            region = (r.owners == k).astype(np.uint8)
            if cv2.connectedComponents(region, connectivity=8)[0] - 1 >= 2:
                raster = _raster(region_polygon(region), *region.shape)
                assert np.array_equal(raster, region.astype(bool))
                return
    pytest.fail("no object in several pieces among 200 calib images")


def test_ultralytics_reads_the_polygon_labels_with_the_detect_boxes(tmp_path):
    """Ultralytics' own label check accepts every written file, and the boxes it derives from the
    polygons are the detect labels (to the 6 decimals both are written with)."""
    from ultralytics.data.utils import verify_image_label

    _write_split(tmp_path / "det", "calib", 10)
    write_segment_split(tmp_path / "seg", "calib", 10, images_from=tmp_path / "det")
    n = 0
    for i in range(10):
        stem = f"calib_{i:05d}"
        img = tmp_path / "seg" / "images" / "calib" / f"{stem}.png"
        lbl = tmp_path / "seg" / "labels" / "calib" / f"{stem}.txt"
        r = verify_image_label((str(img), str(lbl), "", False, 8, 0, 0, False))
        assert r[8] == 0 and r[9] == "", r[9]  # not corrupt, no message
        det = np.loadtxt(tmp_path / "det" / "labels" / "calib" / f"{stem}.txt", ndmin=2).reshape(
            -1, 5
        )
        assert len(r[3]) == len(det)  # one polygon per object
        np.testing.assert_allclose(r[1], det, atol=2e-6)
        n += len(det)
    assert n > 20


def test_the_cached_segment_demo_matches_the_detection_demo(small_demo):
    """Where the segment demo data (``demo_data_yaml(task="segment")``) has run: same image files (hard
    links), one polygon per box label, the text a fresh rendering gives."""
    cache = _demo_cache(small_demo, "shapes-v1-seed0-seg1/labels/test/test_00000.txt")
    det, seg = cache / "shapes-v1-seed0", cache / "shapes-v1-seed0-seg1"
    n = len(list((seg / "labels" / "test").glob("*.txt")))
    assert n >= 20
    for i in range(0, n, 20 if n > 100 else 1):
        stem = f"test_{i:05d}"
        a, b = det / "images" / "test" / f"{stem}.png", seg / "images" / "test" / f"{stem}.png"
        assert a.read_bytes() == b.read_bytes()
        box_lines = (det / "labels" / "test" / f"{stem}.txt").read_text().splitlines()
        seg_text = (seg / "labels" / "test" / f"{stem}.txt").read_text()
        assert len(seg_text.splitlines()) == len(box_lines)
        if i % 100 == 0 or n <= 100 and i % 5 == 0:
            img, labels, polys = render_polygons(0, "test", i)
            lines = segment_lines(labels, polys, img.shape[1], img.shape[0])
            assert seg_text == "\n".join(lines) + ("\n" if lines else "")


def test_demo_segment_data_yaml_writes_a_separate_root(tmp_path, monkeypatch):
    """In a fresh cache (splits shrunk to a few images): the detection demo is rendered, then the
    segment root beside it, hard-linked; the detection root is not touched by the second step;
    a second call rewrites nothing; with_train adds the train split."""
    from det_calib.data.ground_truth import load_data_yaml
    from det_calib.demo import demo_data_yaml
    from det_calib.demo.shapes import SPLIT_SIZES
    from det_calib.tasks import get_task, load_task_split

    monkeypatch.setenv("DET_CALIB_CACHE", str(tmp_path))
    for split, n in (("train", 3), ("calib", 4), ("test", 3)):
        monkeypatch.setitem(SPLIT_SIZES, split, n)
    det = demo_data_yaml().parent
    before = _tree_digest(det)
    yaml = demo_data_yaml(task="segment")
    assert _tree_digest(det) == before
    seg = yaml.parent
    assert seg.name == "shapes-v1-seed0-seg1" and seg.parent == det.parent
    assert "train: images/calib" in yaml.read_text()
    sp = load_task_split(load_data_yaml(yaml), "calib", task="segment")
    assert len(sp.images) == 4 and not get_task("segment").lacks_payload(sp) and sp.gt.height > 0
    for p in sp.images:
        assert p.stat().st_ino == (det / "images" / "calib" / p.name).stat().st_ino
    label = seg / "labels" / "test" / "test_00000.txt"
    stamp = label.stat().st_mtime_ns
    assert demo_data_yaml(task="segment") == yaml and label.stat().st_mtime_ns == stamp
    yaml = demo_data_yaml(task="segment", with_train=True)
    assert "train: images/train" in yaml.read_text()
    assert len(list((seg / "labels" / "train").glob("*.txt"))) == 3
    assert not list(seg.glob(".*tmp*"))  # no temporary folder left
