"""Datasets: data.yaml parsing, YOLO and COCO ground truth, errors on bad input."""

from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from det_calib.data.ground_truth import (
    Split,
    _img_formats_in_source,
    _read_yolo_labels,
    check_class_names,
    label_path,
    load_data_yaml,
    load_split,
    read_label_file,
)
from det_calib.demo.shapes import CLASS_NAMES
from det_calib.errors import InputError

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)


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
    assert (g["x1"].to_numpy() >= -1e-3).all() and (
        g["x2"].to_numpy() <= w + 1e-3
    ).all()  # 6-decimal labels
    # round trip: pixel boxes back to the normalised label of the first image
    lbl = np.loadtxt(label_path(sp.images[0]), ndmin=2)
    first = g.filter(g["image_id"] == 0)
    cx = (first["x1"].to_numpy() + first["x2"].to_numpy()) / 2 / sp.sizes[0, 0]
    np.testing.assert_allclose(np.sort(cx), np.sort(lbl[:, 1]), atol=1e-6)


def test_split_errors(fixture_copy):
    ds = load_data_yaml(fixture_copy / "data.yaml")
    with pytest.raises(InputError, match=r"split `nope` not in .*\(splits: fixture, train, val\)$"):
        load_split(ds, "nope")  # the splits in words, not a Python list
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


def test_class_id_out_of_range_skips_the_image(fixture_copy):
    lbl = min((fixture_copy / "labels" / "fixture").glob("*.txt"))
    lbl.write_text("8 0.5 0.5 0.1 0.1\n")
    ds = load_data_yaml(fixture_copy / "data.yaml")
    with pytest.warns(UserWarning, match=re.escape(f"{lbl}:1: class id 8 out of range 0..7")):
        sp = load_split(ds, "fixture")
    assert len(sp.images) == 11 and sp.corrupt == [
        str(fixture_copy / "images" / "fixture" / f"{lbl.stem}.jpg")
    ]
    # the strict reader, given a fixed image list, refuses the file instead
    images = sorted((fixture_copy / "images" / "fixture").glob("*.jpg"))
    with pytest.raises(
        InputError, match=re.escape(f"malformed label: {lbl}:1: class id 8 out of range 0..7")
    ):
        _read_yolo_labels(images, np.full((12, 2), 64), nc=8, split="fixture")


# line, our reason (None: accepted), whether Ultralytics' verify_image_label drops the file
LABEL_CASES = [
    ("0 0.5 0.5 0.2 nan", "non-finite value `nan`", True),
    ("0 0.5 0.5 inf 0.2", "non-finite value `inf`", True),
    ("0 0.5 0.5 -0.2 0.2", "width -0.2 is negative", True),
    ("0 0.5 0.5 0.2 -1e-3", "height -1e-3 is negative", True),
    (
        "0 0.5 0.5 0.2",
        "expected 5 values `cls cx cy w h` or a polygon `cls x1 y1 x2 y2 x3 y3 ...`, got 4",
        True,
    ),
    ("0 0.5 0.5 0.2 0.2 0.9", "got 6", True),
    ("0 0.5 zero 0.2 0.2", "`zero` is not a number", True),
    ("8 0.5 0.5 0.2 0.2", "class id 8 out of range 0..7", True),
    ("-1 0.5 0.5 0.2 0.2", "class id -1 out of range 0..7", True),
    ("1.5 0.5 0.5 0.2 0.2", "class id 1.5 is not an integer", True),
    (
        "0 1.2 0.5 0.2 0.2",
        "value 1.2 outside [0, 1] (normalised coordinates, tolerance 0.01)",
        True,
    ),
    ("0 0.5 -0.02 0.2 0.2", "value -0.02 outside [0, 1]", True),
    ("0 0.1 0.1 0.5 0.1 0.5 0.5 0.1", "got 8", True),  # a polygon with an odd number of coordinates
    (
        "0 0.5 0.5 0.2 0.2\n1 0.1 0.1 0.5 0.1 0.5 0.6",
        "a polygon line in a file of box lines (line 1)",
        True,
    ),
    # stricter than Ultralytics: a zero-size box overlaps nothing, so a detection of its object
    # would count as incorrect
    ("0 0.5 0.5 0 0.2", "width 0 is zero", False),
    ("0 0.1 0.1 0.1 0.5 0.1 0.9", "polygon has zero width", False),
    # accepted by both: within the 1% tolerance, a 3-point polygon, a duplicate line (dropped)
    ("0 1.005 0.5 0.2 0.2", None, False),
    ("0 -0.005 0.5 0.2 0.2", None, False),
    ("2 0.1 0.2 0.5 0.2 0.5 0.6", None, False),
    ("0 0.5 0.5 0.2 0.2\n0 0.5 0.50 0.2 0.2\n1 0.5 0.5 0.2 0.2", None, False),
]


@pytest.mark.parametrize(("text", "reason", "ultralytics_drops"), LABEL_CASES)
def test_label_checks_name_file_and_line_and_agree_with_ultralytics(
    fixture_copy, text, reason, ultralytics_drops
):
    from ultralytics.data.utils import verify_image_label

    img = min((fixture_copy / "images" / "fixture").glob("*.jpg"))
    lbl = label_path(img)
    polygon = len(text.split("\n")[0].split()) > 6
    good = "3 0.1 0.1 0.3 0.1 0.3 0.3" if polygon else "3 0.5 0.5 0.1 0.1"
    lbl.write_text(
        good + "\n\n" + text + "\n"
    )  # a good line of the same kind, a blank one, then the case
    boxes, problem = read_label_file(lbl, nc=8)
    if reason is None:
        assert problem is None
    else:
        assert problem.startswith(f"{lbl}:") and reason in problem, problem
        first_bad = 3 if "line 1" not in reason else 4
        assert problem.startswith(f"{lbl}:{first_bad}: "), problem
    r = verify_image_label((str(img), str(lbl), "", False, 8, 0, 0, False))
    assert (r[8] == 1) == ultralytics_drops, r[9]
    if reason is None:  # same boxes as Ultralytics (float32 there)
        ours = boxes[np.lexsort(boxes.T[::-1])]
        theirs = r[1][np.lexsort(r[1].T[::-1])]
        np.testing.assert_allclose(ours, theirs, atol=1e-6)


def test_many_malformed_files_one_warning_each_up_to_three(fixture_copy):
    labels = sorted((fixture_copy / "labels" / "fixture").glob("*.txt"))
    for lbl in labels[:7]:
        lbl.write_text("0 0.5 0.5 0.1 nan\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sp = load_split(load_data_yaml(fixture_copy / "data.yaml"), "fixture")
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 4 and all(
        f"{lbl}:1: non-finite value `nan`" in m for lbl, m in zip(labels, msgs[:3])
    )
    assert (
        "... and 4 more files with malformed labels (7 of 12 images left out); all listed in "
        "calibration.json" in msgs[-1]
    )
    assert len(sp.images) == 5 and len(sp.corrupt) == 7 and len(sp.bad_labels) == 7


def test_each_label_file_is_read_once_and_skipped_images_not_decoded(fixture_copy, monkeypatch):
    from pathlib import Path as _Path

    from PIL import Image

    reads, opened = [], []
    real_read, real_open = _Path.read_text, Image.open
    monkeypatch.setattr(
        _Path, "read_text", lambda self, *a, **k: reads.append(self) or real_read(self, *a, **k)
    )
    monkeypatch.setattr(
        Image, "open", lambda fp, *a, **k: opened.append(_Path(fp)) or real_open(fp, *a, **k)
    )
    bad = sorted((fixture_copy / "labels" / "fixture").glob("*.txt"))[4]
    real_bad = bad.read_text()
    bad.write_text(real_bad + "0 0.5 0.5 0.1\n")
    reads.clear()
    with pytest.warns(UserWarning, match="got 4"):
        load_split(load_data_yaml(fixture_copy / "data.yaml"), "fixture")
    labels = [p for p in reads if p.suffix == ".txt"]
    assert len(labels) == 12 and len(set(labels)) == 12
    assert fixture_copy / "images" / "fixture" / f"{bad.stem}.jpg" not in opened


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
    a1, b1 = sp.halves(seed=0)
    a2, b2 = sp.halves(seed=0)
    assert (a1.name, b1.name) == ("fixture[fit-half]", "fixture[eval-half]")
    assert [Split.half_of(h.name) for h in (a1, b1, sp)] == [
        ("fixture", 0),
        ("fixture", 1),
        ("fixture", None),
    ]
    assert a1.images == a2.images and b1.images == b2.images
    assert not set(a1.images) & set(b1.images) and len(a1.images) + len(b1.images) == 12
    assert a1.gt.height + b1.gt.height == sp.gt.height
    # ground truth follows its image
    for half in (a1, b1):
        for k, img in enumerate(half.images):
            n = half.gt.filter(half.gt["image_id"] == k).height
            assert (
                n == len(np.loadtxt(label_path(img), ndmin=2))
                if label_path(img).stat().st_size
                else n == 0
            )


def test_coco_ground_truth_equals_yolo_labels(tmp_path, fixture_yaml):
    ds = load_data_yaml(fixture_yaml)
    sp = load_split(ds, "fixture")
    images, anns = [], []
    for k, p in enumerate(sp.images):
        images.append(
            {
                "id": 100 + k,
                "file_name": p.name,
                "width": int(sp.sizes[k, 0]),
                "height": int(sp.sizes[k, 1]),
            }
        )
    for j, r in enumerate(sp.gt.iter_rows(named=True)):
        w, h = r["x2"] - r["x1"], r["y2"] - r["y1"]
        anns.append(
            {
                "id": j + 1,
                "image_id": 100 + r["image_id"],
                "category_id": 10 + r["cls"],
                "bbox": [r["x1"], r["y1"], w, h],
                "area": w * h,
                "iscrowd": int(j % 7 == 0),
            }
        )
    cats = [{"id": 10 + i, "name": n} for i, n in enumerate(ds.names)]
    path = tmp_path / "ann.json"
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    coco = load_split(ds, "fixture", coco_gt=path).gt
    assert coco.height == sp.gt.height
    np.testing.assert_allclose(
        coco.select("x1", "y1", "x2", "y2").to_numpy(),
        sp.gt.select("x1", "y1", "x2", "y2").to_numpy(),
        atol=1e-9,
    )
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
    np.testing.assert_allclose(
        first.select("x1", "y1", "x2", "y2").to_numpy()[0], [0.1 * w, 0.2 * h, 0.5 * w, 0.6 * h]
    )
    assert first["cls"].to_list() == [2]


def test_coco_images_missing_from_the_json_are_left_out(tmp_path, fixture_yaml):
    ds = load_data_yaml(fixture_yaml)
    sp = load_split(ds, "fixture")
    images = [
        {"id": k, "file_name": p.name, "width": int(sp.sizes[k, 0]), "height": int(sp.sizes[k, 1])}
        for k, p in enumerate(sp.images)
        if k % 3
    ]
    cats = [{"id": i, "name": n} for i, n in enumerate(ds.names)] + [
        {"id": 99, "name": "shapes-parent"}
    ]
    path = tmp_path / "ann.json"
    path.write_text(json.dumps({"images": images, "annotations": [], "categories": cats}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        part = load_split(ds, "fixture", coco_gt=path)
    assert len(part.images) == 8 and part.gt.height == 0
    assert any("not in" in str(w.message) for w in caught)


def test_image_sizes_from_headers_equal_what_ultralytics_reads(tmp_path, fixture_images):
    """Sizes come from headers (EXIF rotation included) and equal the shape of the image as
    Ultralytics' predictor reads it; an image that reader cannot decode is left out."""
    from PIL import Image
    from ultralytics.utils.patches import imread

    from det_calib.data.ground_truth import _image_sizes

    arr = (np.random.default_rng(0).random((40, 60, 3)) * 255).astype(np.uint8)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated by 90 degrees
    paths = []
    for name, kw in (
        ("r.jpg", {"exif": exif.tobytes()}),
        ("r.png", {"exif": exif.tobytes()}),
        ("n.png", {}),
    ):
        Image.fromarray(arr).save(tmp_path / name, **kw)
        paths.append(tmp_path / name)
    data = fixture_images[0].read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) * 3 // 4])  # truncated: no end marker
    (tmp_path / "tail.jpg").write_bytes(data + b"\x00" * 16)  # bytes after the end marker: fine
    paths += [tmp_path / "cut.jpg", tmp_path / "tail.jpg"]
    with pytest.warns(UserWarning, match="skipping unreadable image .*cut.jpg"):
        good, sizes, bad = _image_sizes(paths)
    assert bad == [str(tmp_path / "cut.jpg")] and imread(tmp_path / "cut.jpg") is None
    assert good == [p for p in paths if p.name != "cut.jpg"]
    for p, (w, h) in zip(good, sizes):
        assert (h, w) == imread(p).shape[:2], p
    assert sizes[:3].tolist() == [[40, 60], [40, 60], [60, 40]]


def test_ultralytics_image_formats_read_from_its_source_are_its_own():
    """A run that never imports Ultralytics (``calibrate --boxes``) reads its image formats from its
    source: the same set as the imported constant."""
    from ultralytics.data.utils import IMG_FORMATS

    assert _img_formats_in_source() == frozenset(IMG_FORMATS)
    assert {"jpg", "png"} <= _img_formats_in_source()
