"""Ultralytics' own SegmentationValidator before and after calibration: one val pass for both heads of a
YOLO26n-seg and of its calibrated.pt, box and mask mAP, equal to separate vals of each."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from det_calib.calibrators.temperature import equivalent_threshold
from det_calib.demo import demo_data_yaml
from det_calib.deploy.fold import write_calibrated_checkpoint
from det_calib.evaluation.map_check import ultralytics_val, ultralytics_val_heads

pytest.importorskip("ultralytics")
N_IMAGES = 12


@pytest.fixture(scope="module")
def seg_data(tmp_path_factory):
    """A data.yaml of the first 12 test images of the segment demo (polygon labels)."""
    root = demo_data_yaml(task="segment").parent
    out = tmp_path_factory.mktemp("segdata")
    (out / "images" / "val").mkdir(parents=True)
    (out / "labels" / "val").mkdir(parents=True)
    for img in sorted((root / "images" / "test").iterdir())[:N_IMAGES]:
        os.symlink(img, out / "images" / "val" / img.name)
        shutil.copy(root / "labels" / "test" / (img.stem + ".txt"), out / "labels" / "val")
    names = "".join(
        f"  {i}: {n}\n"
        for i, n in enumerate(
            ("circle", "ellipse", "square", "rectangle", "triangle", "hexagon", "star", "cross")
        )
    )
    (out / "data.yaml").write_text(
        f"path: {out}\ntrain: images/val\nval: images/val\nnames:\n{names}"
    )
    return out / "data.yaml"


@pytest.fixture(scope="module")
def seg_pair(tmp_path_factory, demo_seg_checkpoint):
    d = tmp_path_factory.mktemp("segval")
    original = Path(shutil.copy(demo_seg_checkpoint, d / "seg.pt"))
    ts = {"nms": 0.7, "e2e": 1.4}
    return original, write_calibrated_checkpoint(original, d / "cal.pt", ts), ts


@pytest.mark.slow
def test_one_segment_val_pass_for_both_heads_equals_separate_vals(seg_pair, seg_data):
    original, calibrated, ts = seg_pair
    confs = {h: (0.001, equivalent_threshold(0.001, t)) for h, t in ts.items()}
    both = ultralytics_val_heads(
        original, calibrated, seg_data, split="val", imgsz=320, confs=confs, own_rule=True
    )
    plain = ultralytics_val_heads(
        original, calibrated, seg_data, split="val", imgsz=320, confs=confs
    )
    assert {
        h: tuple({k: v for k, v in d.items() if not k.startswith("mask")} for d in both[h])
        for h in both
    } == plain
    for head, (o, c) in both.items():
        assert set(o) == {"conf", "map50_95", "map50", "mask_map50_95", "mask_map50"}
        assert o == ultralytics_val(
            original, seg_data, split="val", head=head, imgsz=320, own_rule=True
        )
        assert c == ultralytics_val(
            calibrated,
            seg_data,
            split="val",
            head=head,
            conf=confs[head][1],
            imgsz=320,
            own_rule=True,
        )
        # a temperature at the equivalent floor: the same candidates, boxes and masks: identical mAP, both kinds
        assert {k: v for k, v in o.items() if k != "conf"} == {
            k: v for k, v in c.items() if k != "conf"
        }
        assert (
            o["map50_95"] > 0.2 and o["mask_map50_95"] > 0
        )  # not vacuous: real boxes, masks that score
    assert both["nms"][0] != both["e2e"][0]  # two heads, two sets of figures


@pytest.mark.slow
def test_segment_val_figures_are_ultralytics_stock_val(seg_pair, seg_data):
    """The budgeted validator is the stock SegmentationValidator where the NMS does not run out of time."""
    from ultralytics import YOLO

    original, _, _ = seg_pair
    m = YOLO(str(original)).val(
        data=str(seg_data),
        split="val",
        imgsz=320,
        batch=16,
        conf=0.001,
        plots=False,
        save_json=False,
        verbose=False,
        project=str(seg_data.parent),
        name="v",
    )
    got = ultralytics_val(original, seg_data, split="val", head="nms", imgsz=320, own_rule=True)
    assert got["map50_95"] == float(m.box.map) and got["mask_map50_95"] == float(m.seg.map)
    assert got["mask_map50"] == float(m.seg.map50) and got["mask_map50_95"] != got["map50_95"]
