"""Datasets: data.yaml parsing, YOLO and COCO ground truth, errors on bad input."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from det_calib.data import (
    check_class_names,
    half_split,
    label_path,
    load_data_yaml,
    load_split,
)
from det_calib.demo.shapes import CLASS_NAMES
from det_calib.errors import InputError


@pytest.fixture
def fixture_copy(tmp_path, fixture_yaml) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(fixture_yaml.parent, root)
    return root


def test_fixture_split_loads_with_pixels_boxes(fixture_yaml):
    ds = load_data_yaml(fixture_yaml)
    assert ds.names == list(CLASS_NAMES)
    sp = load_split(ds, "fixture")
    assert len(sp.images) == 12 and sp.sizes.shape == (12, 2)
    assert sp.gt.height == 57
    g = sp.gt
    w = sp.sizes[g["image_id"].to_numpy(), 0]
    assert (g["x1"].to_numpy() >= -1e-3).all() and (g["x2"].to_numpy() <= w + 1e-3).all()  # 6-decimal labels
    # round trip: pixel boxes back to the normalised label of the first image
    lbl = np.loadtxt(label_path(sp.images[0]), ndmin=2)
    first = g.filter(g["image_id"] == 0)
    cx = (first["x1"].to_numpy() + first["x2"].to_numpy()) / 2 / sp.sizes[0, 0]
    np.testing.assert_allclose(np.sort(cx), np.sort(lbl[:, 1]), atol=1e-6)


def test_split_errors(fixture_copy):
    ds = load_data_yaml(fixture_copy / "data.yaml")
    with pytest.raises(InputError, match="split `nope` not in"):
        load_split(ds, "nope")
    shutil.rmtree(fixture_copy / "labels")
    with pytest.raises(InputError, match="has no labels"):
        load_split(ds, "fixture")
    shutil.rmtree(fixture_copy / "images")
    with pytest.raises(InputError, match="not found"):
        load_split(ds, "fixture")


def test_empty_split_and_missing_yaml(tmp_path):
    with pytest.raises(InputError, match="data.yaml not found"):
        load_data_yaml(tmp_path / "data.yaml")
    (tmp_path / "images" / "val").mkdir(parents=True)
    (tmp_path / "data.yaml").write_text("val: images/val\nnames: [a, b]\n")
    with pytest.raises(InputError, match="has no images"):
        load_split(load_data_yaml(tmp_path / "data.yaml"), "val")
    (tmp_path / "data.yaml").write_text("val: images/val\n")
    with pytest.raises(InputError, match="missing `names`"):
        load_data_yaml(tmp_path / "data.yaml")


def test_class_id_out_of_range(fixture_copy):
    lbl = sorted((fixture_copy / "labels" / "fixture").glob("*.txt"))[0]
    lbl.write_text("8 0.5 0.5 0.1 0.1\n")
    with pytest.raises(InputError, match="class id 8 out of range 0..7"):
        load_split(load_data_yaml(fixture_copy / "data.yaml"), "fixture")


def test_corrupt_image_is_skipped_with_a_warning(fixture_copy):
    img = sorted((fixture_copy / "images" / "fixture").glob("*.jpg"))[3]
    img.write_bytes(img.read_bytes()[:200])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        sp = load_split(load_data_yaml(fixture_copy / "data.yaml"), "fixture")
    assert len(sp.images) == 11 and sp.corrupt == [str(img)]
    assert any("unreadable image" in str(x.message) for x in w)


def test_class_name_mismatch_message():
    with pytest.raises(InputError, match="differ at id 1: the model says `b`, d.yaml says `x`"):
        check_class_names(["a", "b"], ["a", "x"], data_path="d.yaml")
    with pytest.raises(InputError, match="model has 2 classes, d.yaml has 3"):
        check_class_names(["a", "b"], ["a", "b", "c"], data_path="d.yaml")
    check_class_names(["a"], ["a"], data_path="d.yaml")


def test_half_split_is_deterministic_and_disjoint(fixture_yaml):
    sp = load_split(load_data_yaml(fixture_yaml), "fixture")
    a1, b1 = half_split(sp, seed=0)
    a2, b2 = half_split(sp, seed=0)
    assert a1.images == a2.images and b1.images == b2.images
    assert not set(a1.images) & set(b1.images) and len(a1.images) + len(b1.images) == 12
    assert a1.gt.height + b1.gt.height == sp.gt.height
    # ground truth follows its image
    for half in (a1, b1):
        for k, img in enumerate(half.images):
            n = half.gt.filter(half.gt["image_id"] == k).height
            assert n == len(np.loadtxt(label_path(img), ndmin=2)) if label_path(img).stat().st_size else n == 0


def test_coco_ground_truth_equals_yolo_labels(tmp_path, fixture_yaml):
    ds = load_data_yaml(fixture_yaml)
    sp = load_split(ds, "fixture")
    images, anns = [], []
    for k, p in enumerate(sp.images):
        images.append({"id": 100 + k, "file_name": p.name, "width": int(sp.sizes[k, 0]), "height": int(sp.sizes[k, 1])})
    for j, r in enumerate(sp.gt.iter_rows(named=True)):
        w, h = r["x2"] - r["x1"], r["y2"] - r["y1"]
        anns.append({"id": j + 1, "image_id": 100 + r["image_id"], "category_id": 10 + r["cls"],
                     "bbox": [r["x1"], r["y1"], w, h], "area": w * h, "iscrowd": int(j % 7 == 0)})
    cats = [{"id": 10 + i, "name": n} for i, n in enumerate(ds.names)]
    path = tmp_path / "ann.json"
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    coco = load_split(ds, "fixture", coco_gt=path).gt
    assert coco.height == sp.gt.height
    np.testing.assert_allclose(coco.select("x1", "y1", "x2", "y2").to_numpy(),
                               sp.gt.select("x1", "y1", "x2", "y2").to_numpy(), atol=1e-9)
    assert coco["cls"].to_list() == sp.gt["cls"].to_list()
    assert coco["crowd"].sum() == len(anns[::7])
    cats[0]["name"] = "dodecahedron"
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    with pytest.raises(InputError, match="`dodecahedron`.*not a class of the model"):
        load_split(ds, "fixture", coco_gt=path)


def test_polygon_labels_quoted_ids_and_roboflow_paths(tmp_path, fixture_yaml):
    # Roboflow layout: the yaml beside the split folders, entries written as ../valid/images
    root = tmp_path / "export"
    shutil.copytree(fixture_yaml.parent / "images" / "fixture", root / "valid" / "images")
    shutil.copytree(fixture_yaml.parent / "labels" / "fixture", root / "valid" / "labels")
    names = "".join(f"  '{i}': {n}\n" for i, n in enumerate(CLASS_NAMES))
    (root / "data.yaml").write_text(f"val: ../valid/images\nnames:\n{names}")
    ds = load_data_yaml(root / "data.yaml")
    assert ds.names == list(CLASS_NAMES)
    # a segmentation polygon becomes its bounding box
    lbl = sorted((root / "valid" / "labels").glob("*.txt"))[0]
    lbl.write_text("2 0.1 0.2 0.5 0.2 0.5 0.6 0.1 0.6\n")
    sp = load_split(ds, "val")
    first = sp.gt.filter(sp.gt["image_id"] == 0)
    w, h = sp.sizes[0]
    np.testing.assert_allclose(first.select("x1", "y1", "x2", "y2").to_numpy()[0], [0.1 * w, 0.2 * h, 0.5 * w, 0.6 * h])
    assert first["cls"].to_list() == [2]


def test_coco_images_missing_from_the_json_are_left_out(tmp_path, fixture_yaml):
    ds = load_data_yaml(fixture_yaml)
    sp = load_split(ds, "fixture")
    images = [{"id": k, "file_name": p.name, "width": int(sp.sizes[k, 0]), "height": int(sp.sizes[k, 1])}
              for k, p in enumerate(sp.images) if k % 3]
    cats = [{"id": i, "name": n} for i, n in enumerate(ds.names)] + [{"id": 99, "name": "shapes-parent"}]
    path = tmp_path / "ann.json"
    path.write_text(json.dumps({"images": images, "annotations": [], "categories": cats}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        part = load_split(ds, "fixture", coco_gt=path)
    assert len(part.images) == 8 and part.gt.height == 0
    assert any("not in" in str(w.message) for w in caught)
