"""YOLO segment labels and COCO segmentations read as ground-truth masks (det_calib.tasks.segment.labels)."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
from pycocotools import mask as mask_utils

from det_calib.data.ground_truth import (
    _read_yolo_labels,
    load_data_yaml,
    load_split,
    read_label_file,
)
from det_calib.demo.shapes import CLASS_NAMES, render_with_owners
from det_calib.errors import InputError
from det_calib.tasks import get_task, load_task_split
from det_calib.tasks.segment.demo_labels import write_segment_split
from det_calib.tasks.segment.labels import _polygon_rle, _read_segment_file, segment_rles

pytestmark = pytest.mark.fast  # the inner loop's tier (pytest -m fast)

N_IMAGES = 8
SEGMENT = get_task("segment")


@pytest.fixture(scope="module")
def seg_root(tmp_path_factory):
    """A segment dataset of the first test images of the demo, with its data.yaml."""
    root = tmp_path_factory.mktemp("seg")
    write_segment_split(root, "test", N_IMAGES)
    names = "\n".join(f"  {i}: {n}" for i, n in enumerate(CLASS_NAMES))
    (root / "data.yaml").write_text(
        f"path: {root}\nval: images/test\ntest: images/test\nnames:\n{names}\n"
    )
    return root


@pytest.fixture
def seg_copy(seg_root, tmp_path):
    import shutil

    dst = tmp_path / "copy"
    shutil.copytree(seg_root, dst)
    (dst / "data.yaml").write_text(
        (seg_root / "data.yaml").read_text().replace(str(seg_root), str(dst))
    )
    return dst


# line, reason (None: accepted), whether Ultralytics' verify_image_label drops the file too
SEGMENT_CASES = [
    (
        "0 0.1 0.1 0.5 0.1 0.5 0.5 0.1",
        "polygon with an odd number of coordinates (7; x y pairs expected), got 8 values",
        True,
    ),
    ("0 0.1 0.1 0.5 0.1 0.5 0.5 0.1 0.9 0.9", "odd number of coordinates (9", True),
    # stricter than Ultralytics, which keeps a one-point polygon in a polygon file (a box of zero size)
    ("0 0.1 0.1", "got 3", False),
    ("0 0.1 0.1 0.5 0.1 0.5", "got 6", True),  # two and a half points
    (
        "0 0.1 0.1 1.2 0.1 0.5 0.5",
        "polygon point 2 outside the image: value 1.2 outside [0, 1]",
        True,
    ),
    (
        "0 1.5 1.5 1.9 1.5 1.9 1.9",
        "polygon point 1 outside the image: value 1.5 outside [0, 1]",
        True,
    ),
    ("8 0.1 0.1 0.5 0.1 0.5 0.5", "class id 8 out of range 0..7", True),
    ("0 0.1 0.1 0.1 0.5 0.1 0.9", "polygon has zero width", False),
    ("3 0.1 0.1 0.5 0.1 0.5 0.5", None, False),
    ("3 0.1 0.1 0.5 0.1 1.005 0.5", None, False),  # within Ultralytics' 1% tolerance
]


@pytest.mark.parametrize(("line", "reason", "ultralytics_drops"), SEGMENT_CASES)
def test_segment_line_checks_name_file_and_line_and_agree_with_ultralytics(
    seg_copy, line, reason, ultralytics_drops
):
    from ultralytics.data.utils import verify_image_label

    img = seg_copy / "images" / "test" / "test_00000.png"
    lbl = seg_copy / "labels" / "test" / "test_00000.txt"
    lbl.write_text("2 0.2 0.2 0.4 0.2 0.4 0.4 0.2 0.4\n\n" + line + "\n")
    rows, problem = _read_segment_file(lbl, nc=8)
    if reason is None:
        assert problem is None and len(rows) == 2
        np.testing.assert_array_equal(rows[1][1], np.array(line.split()[1:], float).reshape(-1, 2))
    else:
        assert rows == [] and problem.startswith(f"{lbl}:3: ") and reason in problem, problem
        assert read_label_file(lbl, nc=8)[1] == problem  # the box reader's very words
    r = verify_image_label((str(img), str(lbl), "", False, 8, 0, 0, False))
    assert (r[8] == 1) == ultralytics_drops, r[9]


def test_rows_keep_polygons_and_box_lines_have_none(seg_copy):
    lbl = seg_copy / "labels" / "test" / "test_00001.txt"
    lbl.write_text("1 0.5 0.5 0.2 0.2\n1 0.5 0.5 0.2 0.2\n4 0.1 0.2 0.3 0.4\n")
    rows, problem = _read_segment_file(lbl, nc=8)
    assert problem is None and [(c, p) for c, p in rows] == [
        (1, None),
        (4, None),
    ]  # duplicate dropped


def test_masks_are_the_visible_regions_row_for_row(seg_root):
    sp = load_task_split(load_data_yaml(seg_root / "data.yaml"), "test", task="segment")
    plain = load_split(load_data_yaml(seg_root / "data.yaml"), "test")
    assert sp.gt.drop(SEGMENT.payload).equals(plain.gt) and not SEGMENT.lacks_payload(sp)
    rles = segment_rles(sp)
    for i in range(N_IMAGES):
        r = render_with_owners(0, "test", i)
        rows = np.flatnonzero(sp.gt["image_id"].to_numpy() == i)
        assert len(rows) == len(r.labelled)
        for j, k in zip(rows, r.labelled):
            mask = mask_utils.decode(rles[j]).astype(bool)
            region = r.owners == k
            assert (mask & region).sum() / (mask | region).sum() >= 0.99
            # the ground-truth box (from the polygon, as Ultralytics) is the mask's box within 1e-5 of the image
            x, y, w, h = mask_utils.toBbox(rles[j])
            box = sp.gt.row(int(j), named=True)
            np.testing.assert_allclose(
                [box["x1"], box["y1"], box["x2"], box["y2"]], [x, y, x + w, y + h], atol=1e-5 * 400
            )


def test_malformed_segment_files_warn_and_are_left_out_like_box_labels(seg_copy):
    lbls = sorted((seg_copy / "labels" / "test").glob("*.txt"))
    for lbl in lbls[:5]:  # five malformed files: three named, one summary
        lbl.write_text(lbl.read_text() + "0 0.1 0.1 0.5 0.1 0.5 0.5 0.1\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sp = load_task_split(load_data_yaml(seg_copy / "data.yaml"), "test", task="segment")
    msgs = [str(w.message) for w in caught if "malformed" in str(w.message)]
    assert (
        len(msgs) == 4
        and "and 2 more files with malformed labels (5 of 8 images left out)" in msgs[3]
    )
    assert "odd number of coordinates" in msgs[0]
    assert (
        len(sp.images) == N_IMAGES - 5 and len(sp.bad_labels) == 5 and not SEGMENT.lacks_payload(sp)
    )
    # where the box reader errors (a fixed image list), so does it for polygons: one line
    images = sorted((seg_copy / "images" / "test").glob("*.png"))
    with pytest.raises(InputError, match=re.escape(f"malformed label: {lbls[0]}:")):
        _read_yolo_labels(images, np.full((N_IMAGES, 2), 320), nc=8, split="test")
    # every file malformed: the split has no usable image
    for lbl in lbls[5:]:
        lbl.write_text("0 1.5 1.5 1.9 1.5 1.9 1.9\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InputError, match="has no usable images"):
            load_task_split(load_data_yaml(seg_copy / "data.yaml"), "test", task="segment")


def test_a_box_only_file_gives_rows_without_masks(seg_copy):
    lbl = seg_copy / "labels" / "test" / "test_00002.txt"
    lbl.write_text("3 0.5 0.5 0.2 0.2\n")
    sp = load_task_split(load_data_yaml(seg_copy / "data.yaml"), "test", task="segment")
    assert SEGMENT.lacks_payload(sp) and sp.gt[SEGMENT.payload].null_count() == 1


def test_polygon_rle_clips_to_the_image():
    counts = _polygon_rle(np.array([[-5, -5], [4, -5], [4, 3], [-5, 3]]), 10, 8)
    m = mask_utils.decode({"size": [8, 10], "counts": counts})
    assert m.sum() == 12 and m[:3, :4].all()


def _coco_json(seg_root, path, *, crowd_rle: bool = True, width_delta: int = 0):
    """A COCO JSON of the segment dataset's polygons (in pixels), plus one crowd region as an
    uncompressed RLE and one object as a compressed RLE."""
    sp = load_task_split(load_data_yaml(seg_root / "data.yaml"), "test", task="segment")
    rles = segment_rles(sp)
    images, anns = [], []
    for i, (p, (w, h)) in enumerate(zip(sp.images, sp.sizes)):
        images.append(
            {"id": 100 + i, "file_name": p.name, "width": int(w) + width_delta, "height": int(h)}
        )
    for j, row in enumerate(sp.gt.iter_rows(named=True)):
        i = row["image_id"]
        w, h = (int(x) for x in sp.sizes[i])
        lbl = (seg_root / "labels" / "test" / f"{sp.images[i].stem}.txt").read_text().splitlines()
        k = sum(1 for jj in range(j) if sp.gt["image_id"][jj] == i)
        xy = (np.array(lbl[k].split()[1:], float).reshape(-1, 2) * [w, h]).reshape(-1).tolist()
        seg = [xy]
        if j == 1:  # a compressed RLE (as COCO results are)
            seg = {"size": rles[j]["size"], "counts": rles[j]["counts"].decode()}
        x, y, bw, bh = mask_utils.toBbox(rles[j]).tolist()
        anns.append(
            {
                "id": j + 1,
                "image_id": 100 + i,
                "category_id": int(row["cls"]) + 1,
                "bbox": [x, y, bw, bh],
                "area": float(mask_utils.area(rles[j])),
                "iscrowd": 0,
                "segmentation": seg,
            }
        )
    if crowd_rle:  # a crowd region on image 0: the left half, uncompressed RLE (column-major runs, zeros first)
        w, h = (int(x) for x in sp.sizes[0])
        runs = [h * (w // 2), h * (w - w // 2)]
        anns.append(
            {
                "id": 999,
                "image_id": 100,
                "category_id": 1,
                "bbox": [0, 0, w // 2, h],
                "area": h * (w // 2),
                "iscrowd": 1,
                "segmentation": {"size": [h, w], "counts": [0, *runs]},
            }
        )
    cats = [{"id": i + 1, "name": n} for i, n in enumerate(CLASS_NAMES)]
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return sp, rles


def test_coco_segmentations_polygons_and_rles(seg_root, tmp_path):
    js = tmp_path / "gt.json"
    ref, ref_rles = _coco_json(seg_root, js)
    sp = load_task_split(load_data_yaml(seg_root / "data.yaml"), "test", task="segment", coco_gt=js)
    assert not SEGMENT.lacks_payload(sp) and sp.gt.height == ref.gt.height + 1
    rles = segment_rles(sp)
    crowd = sp.gt["crowd"].to_numpy()
    assert crowd.sum() == 1
    # the polygons and the compressed RLE give the YOLO reader's masks exactly
    ours = [r for r, c in zip(rles, crowd) if not c]
    assert [r["counts"] for r in ours] == [r["counts"] for r in ref_rles]
    crowd_mask = mask_utils.decode(rles[int(np.flatnonzero(crowd)[0])])
    w = int(sp.sizes[0][0])
    assert crowd_mask[:, : w // 2].all() and not crowd_mask[:, w // 2 :].any()


def test_coco_image_size_must_match_the_file(seg_root, tmp_path):
    js = tmp_path / "gt.json"
    _coco_json(seg_root, js, crowd_rle=False, width_delta=10)
    with pytest.raises(InputError, match=r"is 3\d\dx\d+ in the JSON but \d+x\d+ on disk"):
        load_task_split(load_data_yaml(seg_root / "data.yaml"), "test", task="segment", coco_gt=js)


def test_coco_rle_of_another_size_is_refused(seg_root, tmp_path):
    js = tmp_path / "gt.json"
    _coco_json(seg_root, js, crowd_rle=False)
    d = json.loads(js.read_text())
    ann = next(a for a in d["annotations"] if a["image_id"] == d["images"][0]["id"])
    h, w = d["images"][0]["height"], d["images"][0]["width"]
    ann["segmentation"] = {"size": [h + 8, w], "counts": [0, 10, (h + 8) * w - 10]}
    js.write_text(json.dumps(d))
    with pytest.raises(
        InputError, match=rf"annotation {ann['id']} has an RLE of size \[{h + 8}, {w}\]"
    ):
        load_task_split(load_data_yaml(seg_root / "data.yaml"), "test", task="segment", coco_gt=js)
